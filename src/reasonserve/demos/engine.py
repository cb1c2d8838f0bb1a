"""``reasonserve demo``: the embedded engine on a mixed workload, with a determinism proof.

A tiny random Qwen2-style checkpoint is written to a temporary folder; a workload of
deterministic sampled requests (seeded, temperature > 0), ordinary requests and
"reasoning" requests runs three times with different batch compositions and arrival
orders (all together; shuffled with few concurrent requests and a tight token budget;
mixed with extra requests). The report gives throughput, per-phase latencies, DVR
counters, and whether every deterministic request produced identical tokens in all
three runs. A random model has no trained end-of-thinking token, so the demo fixes one
before anything runs (:data:`END_OF_THINKING`, in a 32-token vocabulary so that sampled
reasoning requests reach it) and reports how many reasoning requests crossed it.
"""

from __future__ import annotations

import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import TextIO

from reasonserve.engine import Engine, EngineConfig, SamplingParams, make_tiny_checkpoint

__all__ = ["END_OF_THINKING", "run_engine_demo"]

VOCAB = 32
END_OF_THINKING = 7  # chosen before the run; the engine watches it via EngineConfig


def _workload(seed: int, n: int = 24) -> list[tuple[str, list[int], SamplingParams]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        kind = ("deterministic", "ordinary", "reasoning")[i % 3]
        prompt = [rng.randrange(VOCAB) for _ in range(rng.randint(8, 48))]
        # Reasoning requests think longer and sample hotter, so they reach END_OF_THINKING.
        reasoning = kind == "reasoning"
        params = SamplingParams(
            max_tokens=rng.randint(48, 64) if reasoning else rng.randint(16, 40),
            temperature=1.5 if reasoning else 0.8,
            seed=rng.randrange(2**32),
            deterministic=kind == "deterministic",
            ignore_eos=True,
        )
        out.append((f"{kind}-{i}", prompt, params))
    return out


def _run(path, config: EngineConfig, requests, device, dtype) -> tuple[Engine, dict, float]:
    engine = Engine.from_pretrained(path, config, device=device, dtype=dtype)
    start = time.perf_counter()
    for name, prompt, params in requests:
        engine.add_request(prompt, params, request_id=name)
    outs: dict = {}
    while engine.has_unfinished():
        outs |= {o.request_id: o for o in engine.step()}
    return engine, outs, time.perf_counter() - start


def _latencies(outs) -> dict:
    def mean(values):
        values = [v for v in values if v is not None]
        return statistics.mean(values) * 1e3 if values else None

    reasoning = [o for o in outs if o.request_id.startswith("reasoning")]
    return {
        "ttft_ms": mean([o.metrics.ttft_s for o in outs]),
        "tpot_ms": mean([o.metrics.tpot_s for o in outs]),
        "ttfat_ms_reasoning": mean([o.metrics.ttfat_s for o in reasoning]),
        "reasoning_requests": len(reasoning),
        "reasoning_requests_that_answered": sum(
            o.metrics.first_answer_token_s is not None for o in reasoning
        ),
    }


def run_engine_demo(
    *,
    seed: int = 0,
    json_path: str | None = None,
    out: TextIO,
    progress: Callable[[int, int, str], None] | None = None,
    device: str = "cpu",
    dtype: str | None = None,
) -> int:
    """Run the demo, print the report, optionally write it as JSON; ``progress(done, total, what)``
    hears of each of the three runs; ``device``/``dtype``: where the engine runs
    (``Engine.from_pretrained``'s arguments). Exit status 0 when every deterministic request
    gave the same tokens in all three runs."""
    path = make_tiny_checkpoint(
        tempfile.mkdtemp(prefix="reasonserve-demo-"),
        vocab_size=VOCAB,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=4,
        seed=seed,
    )
    requests = _workload(seed)
    extra = [
        (f"extra-{i}", p, SamplingParams(max_tokens=24, temperature=1.0, seed=i))
        for i, (_, p, _) in enumerate(_workload(seed + 1, 9))
    ]
    shuffled = requests[:]
    random.Random(seed).shuffle(shuffled)
    think = END_OF_THINKING
    runs = [
        ("all together", EngineConfig(end_of_thinking_token_id=think), requests),
        (
            "shuffled, 4 at a time, 24-token steps",
            EngineConfig(end_of_thinking_token_id=think, max_num_seqs=4, max_num_batched_tokens=24),
            shuffled,
        ),
        (
            "mixed with 9 extra requests",
            EngineConfig(end_of_thinking_token_id=think, num_blocks=96),
            shuffled[::2] + extra + shuffled[1::2],
        ),
    ]
    results = []
    for i, (label, config, reqs) in enumerate(runs):
        if progress is not None:
            progress(i, len(runs), label)
        results.append((label, *_run(path, config, reqs, device, dtype)))
    report = _report(results, requests, think, runs[0][1])
    _print(report, out)
    if json_path:
        with open(json_path, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2)
    return 0 if report["all_deterministic_identical"] else 1


def _report(results, requests, think, config: EngineConfig) -> dict:
    det = [name for name, _, p in requests if p.deterministic]
    identical = {
        name: all(r[2][name].token_ids == results[0][2][name].token_ids for r in results) for name in det
    }
    runs = []
    for label, engine, outs, elapsed in results:
        produced = sum(len(o.token_ids) for o in outs.values())
        m = engine.metrics()
        runs.append(
            {
                "run": label,
                "requests": len(outs),
                "output_tokens": produced,
                "seconds": elapsed,
                "tokens_per_s": produced / elapsed,
                "verify_passes": m.verify_passes,
                "rollbacks": m.rollbacks,
                "tokens_rolled_back": m.tokens_rolled_back,
                "preemptions": m.num_preemptions,
                **_latencies(list(outs.values())),
            }
        )
    engine = results[0][1]
    settings = {
        "device": str(engine.model.device),
        "dtype": str(engine.model.dtype).removeprefix("torch."),
        "mode": config.mode,
        "dvr_window": config.dvr_window,
        "dvr_group_size": config.dvr_group_size,
        "block_size": config.block_size,
        "num_blocks": config.num_blocks,
    }
    return {
        "end_of_thinking_token_id": think,
        "settings": settings,
        "runs": runs,
        "deterministic_identical": identical,
        "all_deterministic_identical": all(identical.values()),
    }


_LEGEND = """
  tok/s     output tokens per second of the whole run (wall clock, this machine)
  TTFT ms   mean time from arrival to the first output token
  TPOT ms   mean time per output token after the first
  TTFAT ms  mean time from the end-of-thinking token to the first answer token
            (reasoning requests that crossed it)
  verify    fixed-shape verify passes (DVR); rollbk: verified tokens that disagreed
"""


def _print(report: dict, out: TextIO) -> None:
    st = report["settings"]
    out.write(
        f"reasonserve engine demo: tiny random Qwen2-style model on {st['device']} ({st['dtype']}), "
        f"mode={st['mode']} (DVR window "
        f"{st['dvr_window']}, group {st['dvr_group_size']}), KV {st['num_blocks']} blocks x "
        f"{st['block_size']} tokens\n\n"
    )
    out.write(
        f"{'run':<40} {'reqs':>5} {'tok/s':>8} {'TTFT ms':>8} {'TPOT ms':>8} {'TTFAT ms':>9} "
        f"{'verify':>7} {'rollbk':>7}\n"
    )
    for r in report["runs"]:
        ttfat = r["ttfat_ms_reasoning"]
        out.write(
            f"{r['run']:<40} {r['requests']:>5} {r['tokens_per_s']:>8.1f} {r['ttft_ms']:>8.1f} "
            f"{r['tpot_ms']:>8.1f} {ttfat if ttfat is not None else float('nan'):>9.1f} "
            f"{r['verify_passes']:>7} {r['rollbacks']:>7}\n"
        )
    out.write(_LEGEND)
    ok = sum(report["deterministic_identical"].values())
    total = len(report["deterministic_identical"])
    first = report["runs"][0]
    out.write(
        f"\nreasoning requests that crossed </think> (token {report['end_of_thinking_token_id']}, fixed "
        f"before the run) and switched to ANSWERING: {first['reasoning_requests_that_answered']}/"
        f"{first['reasoning_requests']}\n"
    )
    out.write(f"deterministic requests with identical tokens in all 3 runs: {ok}/{total}\n")
