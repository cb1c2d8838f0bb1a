"""Client overhead of the reasoning programs against ``reasonserve serve`` on loopback.

Usage: ``python benchmarks/programs.py [--repeats 15] [--chunks 8] [--chunk-tokens 16]``.

The server (tiny random checkpoint, block size 16) runs in a subprocess. Two measures:

1. **Per request** (chunk: 128-token prompt, 16 tokens; probe: a 144-token prefix plus
   the probe suffix, 8 greedy tokens): ``HTTPClient.generate`` / ``HTTPClient.probe``
   against the same request posted with bare ``httpx`` and ``json`` (prebuilt body), in
   adjacent pairs. The client overhead is the paired difference (the model's time and
   the transport are in both), as CPU time of this process (``time.process_time``:
   the server is another process, so model time is excluded and other load on the
   machine barely moves it) and as wall-clock time (which carries the model's jitter).
   Reported: p50 / p99 over all pairs.
2. **Per chunk of CoTWithProbe**: the program (a rule that never stops, ``--chunks``
   chunks with a probe after each but the last) against a hand-written loop that sends
   the same requests in the same pattern (the probe overlapping the next chunk) with bare
   ``httpx``; runs alternate, each on its own fresh prompt (one never finds the other's
   chunks in the prefix cache). Overhead per chunk = (program - loop) / chunks, CPU and
   wall-clock, p50 / p99 over runs.

3. **Against prefix length**, without a server: the client's CPU per request (request
   validation, payload, JSON, reply parsing with the echoed prompt ids) against bare
   ``json`` on the same bodies, for 128 to 16,384-token prefixes.

Probe cost: ``probe prompt tokens computed`` = prefix + suffix - tokens the server
reports from its prefix cache (``usage.prompt_tokens_details.cached_tokens``, filled
from the engine's per-request ``num_cached_tokens``), per probe, beside the bound
``block_size + suffix tokens``. Target (issue 15): overhead <= 2 ms p50.
The machine is shared (other jobs run): prefer the medians and pairs to absolute times.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import httpx

from _harness import RESULTS, machine
from reasonserve.certainindex.stopping import AgreeSpanRule
from reasonserve.clients import GenerateRequest, OpenAIShim
from reasonserve.clients.http import HTTPClient
from reasonserve.engine import make_tiny_checkpoint
from reasonserve.programs import CoTWithProbe
from serve import _start_server

BLOCK, SUFFIX = 16, "\n\n**Final Answer**\n\\boxed{"
NEVER = AgreeSpanRule(tokens=10**9, min_tokens=10**9)


def _pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


async def _raw(http: httpx.AsyncClient, body: dict) -> dict:
    resp = await http.post("/v1/completions", content=json.dumps(body).encode(),
                           headers={"content-type": "application/json"})  # fmt: skip
    resp.raise_for_status()
    return json.loads(resp.content)


async def per_request(url: str, repeats: int, rng: random.Random) -> dict:
    diffs: dict[str, list[float]] = {"chunk": [], "probe": []}
    cpu_diffs: dict[str, list[float]] = {"chunk": [], "probe": []}
    raw_s: dict[str, list[float]] = {"chunk": [], "probe": []}
    computed: list[int] = []
    async with HTTPClient(url, OpenAIShim()) as client, httpx.AsyncClient(base_url=url, timeout=60) as http:
        suffix_ids = list(await client.encode(SUFFIX))
        for i in range(repeats * 4):
            prompt = [rng.randrange(256) for _ in range(128)]
            prefix = prompt + [rng.randrange(256) for _ in range(16)]
            pairs = {
                "chunk": (lambda: client.generate(GenerateRequest(prompt, max_tokens=16, seed=i)),
                          {"prompt": prompt, "max_tokens": 16, "seed": i, "return_token_ids": True}),
                "probe": (lambda: client.probe(prefix, SUFFIX, 8),
                          {"prompt": prefix + suffix_ids, "max_tokens": 8, "temperature": 0.0,
                           "return_token_ids": True}),
            }  # fmt: skip
            await _raw(http, {"prompt": prefix, "max_tokens": 1})  # the prefix is in the cache for both
            for kind, (call, body) in pairs.items():
                wall, cpu = [0.0, 0.0], [0.0, 0.0]
                for which in [0, 1] if i % 2 else [1, 0]:
                    start, start_cpu = time.perf_counter(), time.process_time()
                    out = await call() if which == 0 else await _raw(http, body)
                    wall[which], cpu[which] = time.perf_counter() - start, time.process_time() - start_cpu
                    if kind == "probe" and which == 0:
                        computed.append(out.num_computed_tokens)
                diffs[kind].append(wall[0] - wall[1])
                cpu_diffs[kind].append(cpu[0] - cpu[1])
                raw_s[kind].append(wall[1])
    out = {f"{k}_cpu_overhead_ms": _p50_p99(v) for k, v in cpu_diffs.items()}
    out.update({f"{k}_wall_overhead_ms": _p50_p99(v) for k, v in diffs.items()})
    out.update({f"{k}_raw_wall_ms_p50": _pct(v, 0.5) * 1e3 for k, v in raw_s.items()})
    out["probe_computed_tokens"] = {"max": max(computed), "median": statistics.median(computed),
                                    "bound": BLOCK + len(suffix_ids),
                                    "prefix_plus_suffix": 144 + len(suffix_ids)}  # fmt: skip
    return out


def _p50_p99(values: list[float]) -> dict:
    return {"p50": _pct(values, 0.5) * 1e3, "p99": _pct(values, 0.99) * 1e3}


async def _raw_cot(http: httpx.AsyncClient, prompt: list[int], chunks: int, chunk_tokens: int, seed: int,
                   suffix_ids: list[int]) -> None:  # fmt: skip
    """The same request pattern as CoTWithProbe, by hand."""
    ids = list(prompt)
    base = {"max_tokens": chunk_tokens, "temperature": 0.6, "top_p": 0.95, "seed": seed}
    base["return_token_ids"] = True
    probe = {"max_tokens": 20, "temperature": 0.0, "return_token_ids": True}
    reply = await _raw(http, {"prompt": ids, **base})
    for _ in range(1, chunks):
        ids += reply["choices"][0]["token_ids"]
        nxt = asyncio.ensure_future(_raw(http, {"prompt": list(ids), **base}))
        await _raw(http, {"prompt": ids + suffix_ids, **probe})
        reply = await nxt
    ids += reply["choices"][0]["token_ids"]


async def per_chunk(url: str, repeats: int, chunks: int, chunk_tokens: int, rng: random.Random) -> dict:
    cot = CoTWithProbe(chunk_tokens=chunk_tokens, max_tokens=chunks * chunk_tokens, probe_suffix=SUFFIX,
                       rule=NEVER, seed=1)  # fmt: skip
    program, loop, computed, probes = [], [], 0, 0
    cpu: dict[int, list[float]] = {0: [], 1: []}
    async with HTTPClient(url, OpenAIShim()) as client, httpx.AsyncClient(base_url=url, timeout=60) as http:
        suffix_ids = list(await client.encode(SUFFIX))
        for r in range(repeats + 1):
            prompts = [[rng.randrange(256) for _ in range(128)] for _ in range(2)]  # no shared cache
            for prompt in prompts:
                await _raw(http, {"prompt": prompt, "max_tokens": 1})  # the same cache state for both
            for which in [0, 1] if r % 2 else [1, 0]:
                prompt = prompts[which]
                start, start_cpu = time.perf_counter(), time.process_time()
                if which == 0:
                    res = await cot.run(client, prompt)
                    assert res.trace.num_chunks == chunks
                    computed += res.trace.probe_prompt_tokens_computed or 0
                    probes += res.trace.num_probes
                else:
                    await _raw_cot(http, prompt, chunks, chunk_tokens, 1, suffix_ids)
                (program if which == 0 else loop).append(time.perf_counter() - start)
                cpu[which].append(time.process_time() - start_cpu)
    per = [(p - b) / chunks for p, b in zip(program[1:], loop[1:], strict=True)]  # first pair: warm-up
    per_cpu = [(p - b) / chunks for p, b in zip(cpu[0][1:], cpu[1][1:], strict=True)]
    return {
        "cot_cpu_overhead_per_chunk_ms": _p50_p99(per_cpu),
        "cot_wall_overhead_per_chunk_ms": _p50_p99(per),
        "cot_program_wall_s_p50": statistics.median(program[1:]),
        "cot_loop_wall_s_p50": statistics.median(loop[1:]),
        "cot_probe_computed_per_probe": computed / max(probes, 1),
    }


def per_prefix_length(lengths: tuple[int, ...] = (128, 2048, 8192, 16384), repeats: int = 41) -> dict:
    """Client CPU per request against prefix length, without a server: GenerateRequest +
    payload + JSON encoding + reply parsing (the reply echoes the prompt's ids, as vLLM's
    and reasonserve's do with ``return_token_ids``) vs bare ``json`` on the same bodies."""
    shim, out = OpenAIShim(), {}
    for n in lengths:
        ids = [(i * 7919) % 50_000 for i in range(n)]
        choice = {"text": "x" * 64, "token_ids": list(range(16)), "prompt_token_ids": ids}
        choice["finish_reason"] = "length"
        reply = json.dumps({"choices": [choice], "usage": {"prompt_tokens": n}})

        def lib() -> None:
            _, body = shim.payload(GenerateRequest(ids, max_tokens=16, seed=1), stream=False)
            json.dumps(body)
            shim.parse_result(json.loads(reply), "r")

        def bare() -> None:
            json.dumps({"prompt": ids, "max_tokens": 16, "seed": 1, "return_token_ids": True})
            json.loads(reply)

        times: dict[str, list[float]] = {"lib": [], "bare": []}
        for _ in range(repeats):
            for key, fn in (("lib", lib), ("bare", bare)):
                start = time.process_time()
                fn()
                times[key].append(time.process_time() - start)
        lib_ms, bare_ms = (statistics.median(times[k]) * 1e3 for k in ("lib", "bare"))
        out[str(n)] = {"client_ms": lib_ms, "bare_json_ms": bare_ms, "overhead_ms": lib_ms - bare_ms}
    return {"cpu_per_request_by_prefix_tokens": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--chunk-tokens", type=int, default=16)
    args = parser.parse_args()
    path = make_tiny_checkpoint(tempfile.mkdtemp())
    proc, url = _start_server(path, 8, 1)
    try:
        rng = random.Random(0)
        result = per_prefix_length()
        result.update(asyncio.run(per_request(url, args.repeats, rng)))
        result.update(asyncio.run(per_chunk(url, args.repeats, args.chunks, args.chunk_tokens, rng)))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    result["machine"] = machine("cpu")
    result["args"] = vars(args)
    print(json.dumps(result, indent=2))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "programs.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
