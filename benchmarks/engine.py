"""Engine throughput vs ``transformers`` ``generate``, DVR rollback cost, scheduler overhead.

Usage: ``python benchmarks/engine.py [--repeats 3] [--batches 1 8 32 64] [--threads 1]
[--device cpu|cuda] [--dtype auto|float32|bfloat16|float16]`` (on a GPU, ``benchmarks/gpu.py``
is the full comparison at model-sized shapes).

One random Qwen2-style checkpoint (vocab 4096, hidden 512, intermediate 1024, 4 layers,
GQA 8/2), prompts of 64 random tokens, 64 greedy tokens each (``ignore_eos``). In one
process, alternated, medians of ``--repeats`` runs:

* tokens/s of ``transformers`` ``generate`` (static batch, same folder, fp32, eager) and
  of the engine in ``mode="dvr"`` (all requests non-deterministic) and
  ``mode="batch_invariant"``, for each batch size; a fresh engine per run (no prefix
  cache carried between runs);
* at batch 32, ``mode="dvr"`` with 0/10/50/100 % deterministic requests, the fast-path
  fault seam flipping a token with probability 0, 0.01 or 0.1, so rollbacks happen and
  their cost is measured (ratio to 0 % deterministic);
* scheduler overhead per step with 256 running requests: the time of
  ``Scheduler.schedule`` (view, policy, validation, apply, token hand-out) and the rest
  of ``Engine.step`` outside the model forward and sampling.

Targets (issue #12, batch 32): dvr >= 1.5x transformers; batch_invariant >= 0.8x dvr;
10 % deterministic >= 0.9x 0 %; scheduler overhead <= 1 ms/step at 256 running.
``--threads 1`` by default: the box's cores are shared, and more threads than free
cores make every matmul (ours and transformers') far slower and noisier.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _harness import RESULTS, machine
from reasonserve.engine import DecoderModel, Engine, EngineConfig, SamplingParams, make_tiny_checkpoint
from reasonserve.progress import track

PROMPT, NEW = 64, 64


def checkpoint() -> str:
    return str(
        make_tiny_checkpoint(
            tempfile.mkdtemp(),
            vocab_size=4096,
            hidden_size=512,
            intermediate_size=1024,
            num_hidden_layers=4,
            num_attention_heads=8,
            num_key_value_heads=2,
        )
    )


def prompts(batch: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(4096) for _ in range(PROMPT)] for _ in range(batch)]


def engine_config(batch: int, mode: str) -> EngineConfig:
    return EngineConfig(
        block_size=16,
        num_blocks=max(64, batch * 16),
        max_num_seqs=max(batch, 1),
        max_num_batched_tokens=4096,
        mode=mode,
    )


def run_engine(model, config, batch_prompts, params, fault=None) -> tuple[float, Engine]:
    engine = Engine(model, config, fast_path_fault=fault)
    start = time.perf_counter()
    outs = engine.generate(batch_prompts, params)
    elapsed = time.perf_counter() - start
    assert sum(len(o.token_ids) for o in outs) == len(batch_prompts) * NEW
    return elapsed, engine


def run_hf(hf, batch_prompts) -> float:
    ids = torch.tensor(batch_prompts, device=hf.device)
    start = time.perf_counter()
    with torch.no_grad():
        out = hf.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            do_sample=False,
            pad_token_id=0,
        )
    out = out.cpu()  # the tokens on the host, as the engine returns them
    elapsed = time.perf_counter() - start
    assert out.shape[1] == PROMPT + NEW
    return elapsed


def throughput(model, hf, batches, repeats) -> list[dict]:
    rows = []
    greedy = SamplingParams(max_tokens=NEW, temperature=0.0, ignore_eos=True)
    for batch in track(batches, "engine throughput", unit="batch sizes"):
        ps = prompts(batch)
        runs = {
            "transformers": lambda: run_hf(hf, ps),
            "dvr": lambda: run_engine(model, engine_config(batch, "dvr"), ps, greedy)[0],
            "batch_invariant": lambda: run_engine(model, engine_config(batch, "batch_invariant"), ps, greedy)[
                0
            ],
        }
        for fn in runs.values():  # warm-up
            fn()
        times: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(repeats):
            for name, fn in runs.items():
                times[name].append(fn())
        tps = {k: batch * NEW / statistics.median(v) for k, v in times.items()}
        rows.append(
            {
                "batch": batch,
                **{f"{k}_tok_s": v for k, v in tps.items()},
                "dvr_vs_transformers": tps["dvr"] / tps["transformers"],
                "batch_invariant_vs_dvr": tps["batch_invariant"] / tps["dvr"],
            }
        )
        print(
            f"batch {batch:>3}: transformers {tps['transformers']:8.1f} tok/s  dvr {tps['dvr']:8.1f} "
            f"({rows[-1]['dvr_vs_transformers']:.2f}x)  batch_invariant {tps['batch_invariant']:8.1f} "
            f"({rows[-1]['batch_invariant_vs_dvr']:.2f}x of dvr)",
            flush=True,
        )
    return rows


def _flipper(p: float, seed: int):
    rng = random.Random(seed)
    return None if p == 0 else (lambda _r, _pos, tok: (tok + 1) % 4096 if rng.random() < p else tok)


def dvr_sweep(model, repeats, batch=32) -> list[dict]:
    ps = prompts(batch, seed=1)
    configs = [(f, p) for f in (0.0, 0.1, 0.5, 1.0) for p in ((0.0,) if f == 0 else (0.0, 0.01, 0.1))]

    def params(fraction):
        det = set(random.Random(2).sample(range(batch), round(fraction * batch)))
        return [
            SamplingParams(max_tokens=NEW, temperature=0.0, ignore_eos=True, deterministic=i in det)
            for i in range(batch)
        ]

    times: dict = {c: [] for c in configs}
    stats: dict = {}
    for rep in range(repeats + 1):
        for f, p in configs:
            elapsed, engine = run_engine(model, engine_config(batch, "dvr"), ps, params(f), _flipper(p, rep))
            if rep:  # the first round warms up
                times[(f, p)].append(elapsed)
            stats[(f, p)] = engine.metrics()
    base = statistics.median(times[(0.0, 0.0)])
    rows = []
    for f, p in configs:
        m, t = stats[(f, p)], statistics.median(times[(f, p)])
        rows.append(
            {
                "deterministic_pct": 100 * f,
                "flip_p": p,
                "tok_s": batch * NEW / t,
                "ratio_to_0pct": base / t,
                "verify_passes": m.verify_passes,
                "rollbacks": m.rollbacks,
                "tokens_rolled_back": m.tokens_rolled_back,
            }
        )
        r = rows[-1]
        print(
            f"dvr {r['deterministic_pct']:>5.0f}% det, flip p={p:<5}: {r['tok_s']:8.1f} tok/s "
            f"({r['ratio_to_0pct']:.2f}x of 0%), {m.verify_passes} passes, {m.rollbacks} rollbacks, "
            f"{m.tokens_rolled_back} tokens rolled back",
            flush=True,
        )
    return rows


def scheduler_overhead(running=256, steps=20, device="cpu") -> dict:
    path = make_tiny_checkpoint(
        tempfile.mkdtemp(),
        vocab_size=256,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    model = DecoderModel.from_pretrained(path, device=device)
    engine = Engine(
        model,
        EngineConfig(
            block_size=16, num_blocks=running * 8, max_num_seqs=running, max_num_batched_tokens=running * 64
        ),
    )
    for i in range(running):
        engine.add_request(
            [t % 256 for t in prompts(1, seed=i)[0][:32]], SamplingParams(max_tokens=100, temperature=0.0)
        )
    engine.step()  # prefill everything
    sched, inner = [], []
    model_time = [0.0]
    forward, sample = model.forward_paged, engine.runner.sample

    def timed(fn):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                model_time[0] += time.perf_counter() - t

        return wrapper

    model.forward_paged, engine.runner.sample = timed(forward), timed(sample)
    schedule = engine.scheduler.schedule
    for _ in range(steps):
        t0 = time.perf_counter()
        schedule_result = schedule()
        t1 = time.perf_counter()
        engine.scheduler.schedule = lambda r=schedule_result: r
        model_time[0] = 0.0
        engine.step()
        t2 = time.perf_counter()
        engine.scheduler.schedule = schedule
        sched.append(t1 - t0)
        inner.append(t2 - t1 - model_time[0])
    assert len(engine.running) == running
    out = {
        "running": running,
        "schedule_ms": 1e3 * statistics.median(sched),
        "rest_of_step_ms": 1e3 * statistics.median(inner),
    }
    out["total_ms"] = out["schedule_ms"] + out["rest_of_step_ms"]
    print(
        f"scheduler overhead at {running} running: schedule {out['schedule_ms']:.3f} ms + rest of step "
        f"(outside model and sampling) {out['rest_of_step_ms']:.3f} ms = {out['total_ms']:.3f} ms/step"
    )
    return out


def targets(rows, sweep, overhead) -> dict:
    at32 = next((r for r in rows if r["batch"] == 32), None)
    ten = [r for r in sweep if r["deterministic_pct"] == 10 and r["flip_p"] == 0.0]
    out = {"scheduler_overhead_ms<=1": overhead["total_ms"] <= 1.0}
    if at32:
        out["dvr>=1.5x_transformers"] = at32["dvr_vs_transformers"] >= 1.5
        out["batch_invariant>=0.8x_dvr"] = at32["batch_invariant_vs_dvr"] >= 0.8
    if ten:
        out["dvr_10pct>=0.9x_0pct"] = ten[0]["ratio_to_0pct"] >= 0.9
    return out


def plot(rows, sweep, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4))
    x = range(len(rows))
    for i, (key, label) in enumerate(
        (
            ("transformers_tok_s", "transformers generate"),
            ("dvr_tok_s", "engine dvr"),
            ("batch_invariant_tok_s", "engine batch_invariant"),
        )
    ):
        a.bar([j + 0.27 * (i - 1) for j in x], [r[key] for r in rows], width=0.27, label=label)
    a.set_xticks(list(x), [str(r["batch"]) for r in rows])
    a.set_xlabel("batch (64-token prompts, 64 greedy tokens)")
    a.set_ylabel("output tokens / s (median)")
    a.legend()
    labels = [f"{r['deterministic_pct']:.0f}% p={r['flip_p']}" for r in sweep]
    b.barh(labels, [r["ratio_to_0pct"] for r in sweep])
    b.axvline(0.9, color="red", linewidth=0.8)
    b.set_xlabel("throughput / 0% deterministic (batch 32)")
    b.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--skip", nargs="*", default=[], choices=["throughput", "dvr", "scheduler"])
    parser.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    parser.add_argument("--dtype", default="auto", help="auto: float32 on CPU, bfloat16 on CUDA")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import transformers

    path = checkpoint()
    model = DecoderModel.from_pretrained(path, device=args.device, dtype=args.dtype)
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=model.dtype, attn_implementation="eager" if args.device == "cpu" else "sdpa"
    ).to(model.device)
    hf.eval()
    meta = machine(str(model.device)) | {"transformers": transformers.__version__, "repeats": args.repeats,
                                         "dtype": str(model.dtype)}  # fmt: skip
    print(meta, flush=True)
    rows = [] if "throughput" in args.skip else throughput(model, hf, args.batches, args.repeats)
    sweep = [] if "dvr" in args.skip else dvr_sweep(model, args.repeats)
    skip_overhead = "scheduler" in args.skip
    overhead = {"total_ms": float("nan")} if skip_overhead else scheduler_overhead(device=args.device)
    met = targets(rows, sweep, overhead)
    print("targets:", ", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in met.items()))
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {"meta": meta, "throughput": rows, "dvr": sweep, "scheduler": overhead, "targets": met}
    (RESULTS / "engine.json").write_text(json.dumps(payload, indent=2))
    if rows and sweep:
        plot(rows, sweep, RESULTS / "engine.png")


if __name__ == "__main__":
    main()
