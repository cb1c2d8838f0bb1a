"""``reasonserve demo``: the embedded engine on a mixed workload, with a determinism proof.

A tiny random Qwen2-style checkpoint is written to a temporary folder; a workload of
deterministic sampled requests (seeded, temperature > 0), ordinary requests and
"reasoning" requests runs three times with different batch compositions and arrival
orders (all together; shuffled with few concurrent requests and a tight token budget;
mixed with extra requests). The report gives throughput, per-phase latencies, DVR
counters, and whether every deterministic request produced identical tokens in all
three runs. A random model has no real end-of-thinking token, so the demo designates
as ``</think>`` the token found in the most reasoning outputs of a warm-up run.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from typing import TextIO

from reasonserve.engine import Engine, EngineConfig, SamplingParams, make_tiny_checkpoint

__all__ = ["run_engine_demo"]


def _workload(seed: int, n: int = 24) -> list[tuple[str, list[int], SamplingParams]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        kind = ("deterministic", "ordinary", "reasoning")[i % 3]
        prompt = [rng.randrange(512) for _ in range(rng.randint(8, 48))]
        params = SamplingParams(max_tokens=rng.randint(16, 40), temperature=0.8, seed=rng.randrange(2**32),
                                deterministic=kind == "deterministic", ignore_eos=True)  # fmt: skip
        out.append((f"{kind}-{i}", prompt, params))
    return out


def _progress(done: int, total: int, label: str, err: TextIO) -> None:
    bar = "#" * done + "." * (total - done)
    err.write(f"\r[{bar}] {done}/{total} {label:<40}")
    err.flush()


def _run(path, config: EngineConfig, requests) -> tuple[Engine, dict, float]:
    engine = Engine.from_pretrained(path, config)
    start = time.perf_counter()
    ids = {name: engine.add_request(prompt, params, request_id=name) for name, prompt, params in requests}
    while engine.has_unfinished():
        engine.step()
    elapsed = time.perf_counter() - start
    return engine, {name: engine.finished[rid] for name, rid in ids.items()}, elapsed


def _latencies(seqs) -> dict:
    def mean(values):
        values = [v for v in values if v is not None]
        return statistics.mean(values) * 1e3 if values else None

    tpot = [
        (s.metrics.finished_s - s.metrics.first_token_s) / (len(s.output) - 1)
        for s in seqs
        if len(s.output) > 1
    ]
    reasoning = [s for s in seqs if s.request_id.startswith("reasoning")]
    answered = sum(s.metrics.first_answer_token_s is not None for s in reasoning)
    return {
        "ttft_ms": mean([s.metrics.ttft_s for s in seqs]),
        "tpot_ms": mean(tpot),
        "ttfat_ms_reasoning": mean([s.metrics.ttfat_s for s in reasoning]),
        "reasoning_requests_that_answered": answered,
    }


def run_engine_demo(
    *, seed: int = 0, json_path: str | None = None, out: TextIO, err: TextIO = sys.stderr
) -> int:
    path = make_tiny_checkpoint(tempfile.mkdtemp(prefix="reasonserve-demo-"), vocab_size=512, hidden_size=256,
                                intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
                                num_key_value_heads=4, seed=seed)  # fmt: skip
    requests = _workload(seed)
    _progress(0, 4, "warm-up: choosing </think>", err)
    reasoning = [r for r in requests if r[0].startswith("reasoning")]
    _, warm, _ = _run(path, EngineConfig(mode="batch_invariant"), reasoning)
    # The token found in the most reasoning outputs plays </think> (counted once per request).
    think = Counter(t for s in warm.values() for t in set(s.output)).most_common(1)[0][0]
    extra = [(f"extra-{i}", p, SamplingParams(max_tokens=24, temperature=1.0, seed=i)) for i, (_, p, _) in
             enumerate(_workload(seed + 1, 9))]  # fmt: skip
    shuffled = requests[:]
    random.Random(seed).shuffle(shuffled)
    runs = [
        ("all together", EngineConfig(end_of_thinking_token_id=think), requests),
        ("shuffled, 4 at a time, 24-token steps",
         EngineConfig(end_of_thinking_token_id=think, max_num_seqs=4, max_num_batched_tokens=24), shuffled),
        ("mixed with 9 extra requests", EngineConfig(end_of_thinking_token_id=think, num_blocks=96),
         shuffled[::2] + extra + shuffled[1::2]),
    ]  # fmt: skip
    results = []
    for i, (label, config, reqs) in enumerate(runs, start=1):
        _progress(i, 4, label, err)
        results.append((label, *_run(path, config, reqs)))
    err.write("\n")
    report = _report(results, requests, think)
    _print(report, out)
    if json_path:
        with open(json_path, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2)
    return 0 if report["all_deterministic_identical"] else 1


def _report(results, requests, think) -> dict:
    det = [name for name, _, p in requests if p.deterministic]
    identical = {name: all(r[2][name].output == results[0][2][name].output for r in results) for name in det}
    runs = []
    for label, engine, seqs, elapsed in results:
        produced = sum(len(s.output) for s in seqs.values())
        runs.append({
            "run": label, "requests": len(seqs), "output_tokens": produced, "seconds": elapsed,
            "tokens_per_s": produced / elapsed, **engine.stats, **_latencies(list(seqs.values())),
        })  # fmt: skip
    return {"end_of_thinking_token_id": think, "runs": runs, "deterministic_identical": identical,
            "all_deterministic_identical": all(identical.values())}  # fmt: skip


def _print(report: dict, out: TextIO) -> None:
    out.write("reasonserve engine demo: tiny random Qwen2-style model, DVR mode (window 8, group 4)\n\n")
    out.write(f"{'run':<40} {'reqs':>5} {'tok/s':>8} {'TTFT ms':>8} {'TPOT ms':>8} {'TTFAT ms':>9} "
              f"{'verify':>7} {'rollbk':>7}\n")  # fmt: skip
    for r in report["runs"]:
        ttfat = r["ttfat_ms_reasoning"]
        out.write(f"{r['run']:<40} {r['requests']:>5} {r['tokens_per_s']:>8.1f} {r['ttft_ms']:>8.1f} "
                  f"{r['tpot_ms']:>8.1f} {ttfat if ttfat is not None else float('nan'):>9.1f} "
                  f"{r['verify_passes']:>7} {r['rollbacks']:>7}\n")  # fmt: skip
    ok = sum(report["deterministic_identical"].values())
    total = len(report["deterministic_identical"])
    answered = report["runs"][0]["reasoning_requests_that_answered"]
    out.write(f"\nreasoning requests that reached </think> (token {report['end_of_thinking_token_id']}) and "
              f"switched to ANSWERING: {answered}/8 (TTFAT above)\n")  # fmt: skip
    out.write(f"deterministic requests with identical tokens in all 3 runs: {ok}/{total}\n")
