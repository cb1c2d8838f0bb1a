"""Engine throughput with decode-verify-rollback vs the all-batch-invariant mode.

Usage: ``python benchmarks/dvr.py [--requests 32] [--tokens 48]``. One random model
(Qwen2-style, hidden 512, 4 layers) and one offline workload; each configuration runs
the same requests in the same process. Reported: output tokens per second, the ratio to
the non-deterministic run, verify passes and rollback/recompute statistics (the form
of LLM-42's Table 4), and a window x group sweep at 100% deterministic traffic.
Targets (issue #4): at 10% deterministic traffic >= 0.9x the non-deterministic
throughput; at 100%, at least as fast as the all-batch-invariant mode. Each
configuration is the median of 3 runs; ``benchmarks/engine.py`` has the alternated
comparison with fault-injected rollbacks.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _harness import RESULTS, machine
from reasonserve.engine import Engine, EngineConfig, SamplingParams, make_tiny_checkpoint
from reasonserve.progress import track

FRACTIONS = (0.0, 0.02, 0.05, 0.10, 0.20, 0.50, 1.0)


def workload(n: int, tokens: int, fraction: float, seed: int = 0):
    rng = random.Random(seed)
    det = set(rng.sample(range(n), round(fraction * n)))
    prompts = [[rng.randrange(2048) for _ in range(rng.randint(16, 64))] for _ in range(n)]
    params = [SamplingParams(max_tokens=tokens, temperature=0.8, seed=rng.randrange(2**32), ignore_eos=True,
                             deterministic=i in det) for i in range(n)]  # fmt: skip
    return prompts, params


def run(path, config: EngineConfig, prompts, params, repeats: int = 3) -> dict:
    """Median of ``repeats`` runs (a fresh engine each, so no prefix cache is carried)."""
    times = []
    for _ in range(repeats):
        engine = Engine.from_pretrained(path, config)
        start = time.perf_counter()
        outs = engine.generate(prompts, params)
        times.append(time.perf_counter() - start)
    elapsed = statistics.median(times)
    produced = sum(len(o.token_ids) for o in outs)
    m = engine.metrics()
    return {"seconds": elapsed, "tokens_per_s": produced / elapsed, "verify_passes": m.verify_passes,
            "verify_tokens": engine.dvr.verify_tokens, "rollbacks": m.rollbacks,
            "tokens_rolled_back": m.tokens_rolled_back,
            "recompute_pct": 100 * m.tokens_rolled_back / max(produced, 1)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=48)
    args = parser.parse_args()
    path = make_tiny_checkpoint(
        tempfile.mkdtemp(), vocab_size=2048, hidden_size=512, intermediate_size=1024,
        num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
    )  # fmt: skip
    base_cfg = dict(block_size=16, num_blocks=1024, max_num_seqs=args.requests, max_num_batched_tokens=1024)
    rows = []
    for fraction in track(FRACTIONS, "dvr deterministic share", unit="fractions"):
        prompts, params = workload(args.requests, args.tokens, fraction)
        rows.append({"mode": "dvr", "deterministic_pct": 100 * fraction,
                     **run(path, EngineConfig(**base_cfg), prompts, params)})  # fmt: skip
    prompts, params = workload(args.requests, args.tokens, 1.0)
    rows.append({"mode": "batch_invariant", "deterministic_pct": 100.0,
                 **run(path, EngineConfig(**base_cfg, mode="batch_invariant"), prompts, params)})  # fmt: skip
    base = rows[0]["tokens_per_s"]
    for r in rows:
        r["ratio_to_nondeterministic"] = r["tokens_per_s"] / base
    sweep = []
    for window, group in track(((4, 8), (8, 4), (16, 2), (32, 1), (8, 1)), "dvr window x group"):
        cfg = EngineConfig(**base_cfg, dvr_window=window, dvr_group_size=group)
        sweep.append({"window": window, "group": group, **run(path, cfg, prompts, params)})
    print(f"{'mode':<16} {'det %':>6} {'tok/s':>9} {'ratio':>6} {'verify':>7} {'rollbk':>7} {'recomp %':>9}")
    for r in rows:
        print(f"{r['mode']:<16} {r['deterministic_pct']:>6.0f} {r['tokens_per_s']:>9.1f} "
              f"{r['ratio_to_nondeterministic']:>6.2f} {r['verify_passes']:>7} {r['rollbacks']:>7} "
              f"{r['recompute_pct']:>9.2f}")  # fmt: skip
    print("window x group at 100% deterministic:")
    for r in sweep:
        print(f"  {r['window']:>3} x {r['group']:<3} {r['tokens_per_s']:>9.1f} tok/s, "
              f"{r['verify_passes']} passes, {r['rollbacks']} rollbacks, "
              f"recompute {r['recompute_pct']:.2f}%")  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "dvr.json").write_text(
        json.dumps({"meta": machine("cpu"), "fractions": rows, "sweep": sweep}, indent=2)
    )


if __name__ == "__main__":
    main()
