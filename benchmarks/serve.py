"""The HTTP server under a streaming closed loop, against the in-process engine.

Usage: ``python benchmarks/serve.py [--clients 1,8,32,128] [--duration-s 5] [--repeats 3]``.
One tiny random checkpoint (``make_tiny_checkpoint`` defaults); ``reasonserve serve``
runs in a subprocess on a loopback port. For each client count C, C asyncio clients
each keep one streaming request in flight (random 16-token prompt, ``max_tokens`` 32,
temperature 1) for ``duration_s``; meanwhile a prober GETs ``/health`` every 50 ms.
The baseline is the same closed loop on an ``Engine`` in this process (C requests kept
in it, one replaced as soon as one finishes). Baseline and server runs alternate;
medians over repeats.

Reported per C: output tok/s of server and engine; overhead per token, as wall-clock
(engine tok/s / server tok/s - 1) and as CPU time (server process CPU per token, all
threads, from /proc, / baseline CPU per token - 1; on a shared machine the CPU measure
is the steadier one); the clients' own CPU per token; TTFT p50/p99 (client side, to
the first chunk with a token); ``/health`` latency p50/p99. Goals (issue 13):
``/health`` p99 <= 50 ms and overhead <= 15% at 32 streams. The clients share the
machine with the server, so wall-clock server numbers include their CPU cost. Torch
runs ``--torch-threads`` (default 1) intra-op threads in both: on a small shared
machine, OpenMP threads that spin against other load make either side erratic.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import torch

from _harness import RESULTS, machine
from reasonserve.engine import Engine, EngineConfig, SamplingParams, make_tiny_checkpoint

PROMPT_TOKENS, MAX_TOKENS = 16, 32


def _engine_config(clients: int) -> EngineConfig:
    return EngineConfig(block_size=16, num_blocks=1024, max_num_seqs=max(clients, 1))


class EngineLoop:
    """The baseline: one in-process engine, C requests always in it."""

    def __init__(self, path, clients: int) -> None:
        self.engine = Engine.from_pretrained(path, _engine_config(clients))
        self.clients = clients
        self.run(1.0, seed=99)  # warm-up: the first steps of a fresh engine are slow

    def run(self, duration_s: float, seed: int) -> dict:
        """Output tok/s over ``duration_s`` (tokens of unfinished requests included; they are aborted)."""
        rng, live = random.Random(seed), set()

        def add() -> None:
            prompt = [rng.randrange(256) for _ in range(PROMPT_TOKENS)]
            params = SamplingParams(max_tokens=MAX_TOKENS, seed=rng.randrange(2**31))
            live.add(self.engine.add_request(prompt, params))

        for _ in range(self.clients):
            add()
        tokens, start, cpu = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - start < duration_s:
            for out in self.engine.step():
                tokens += len(out.token_ids)
                live.discard(out.request_id)
                add()
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        for rid in live:  # partial requests count, as their streamed tokens do for the server
            tokens += len(self.engine.verified_tokens(rid))
            self.engine.abort(rid)
        return {"tok_s": tokens / elapsed, "cpu_us_per_token": 1e6 * cpu / max(tokens, 1)}


async def _stream_once(client, rng: random.Random, ttfts: list) -> int:
    body = {
        "prompt": [rng.randrange(256) for _ in range(PROMPT_TOKENS)],
        "max_tokens": MAX_TOKENS,
        "seed": rng.randrange(2**31),
        "stream": True,
        "return_token_ids": True,
    }
    start, tokens = time.perf_counter(), 0
    async with client.stream("POST", "/v1/completions", json=body) as r:
        async for line in r.aiter_lines():
            if not line.startswith("data: {"):
                continue
            choices = json.loads(line[6:])["choices"]
            new = len(choices[0].get("token_ids", [])) if choices else 0
            if new and tokens == 0:
                ttfts.append(time.perf_counter() - start)
            tokens += new
    return tokens


async def _server_run(url: str, clients: int, duration_s: float, seed: int, pid: int) -> dict:
    import httpx

    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    ttfts: list[float] = []
    health: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        end = time.perf_counter() + duration_s

        async def worker(i: int) -> int:
            rng, total = random.Random(seed * 1000 + i), 0
            while time.perf_counter() < end:
                total += await _stream_once(client, rng, ttfts)
            return total

        async def prober() -> None:
            async with httpx.AsyncClient(base_url=url, timeout=60) as probe:
                while time.perf_counter() < end:
                    t = time.perf_counter()
                    (await probe.get("/health")).raise_for_status()
                    health.append(time.perf_counter() - t)
                    await asyncio.sleep(0.05)

        start, server_cpu, client_cpu = time.perf_counter(), _cpu_s(pid), time.process_time()
        results = await asyncio.gather(*(worker(i) for i in range(clients)), prober())
        elapsed, server_cpu = time.perf_counter() - start, _cpu_s(pid) - server_cpu
        client_cpu = time.process_time() - client_cpu
    tokens = max(sum(results[:-1]), 1)
    return {
        "tok_s": tokens / elapsed,
        "cpu_us_per_token": 1e6 * server_cpu / tokens,
        "client_cpu_us_per_token": 1e6 * client_cpu / tokens,
        "ttft": ttfts,
        "health": health,
    }


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def _start_server(path, clients_max: int, threads: int) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [
        sys.executable,
        "-m",
        "reasonserve",
        "serve",
        "--model",
        str(path),
        "--port",
        str(port),
        "--num-blocks",
        "1024",
        "--block-size",
        "16",
        "--max-num-seqs",
        str(clients_max),
        "--max-connections",
        "4096",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    url = f"http://127.0.0.1:{port}"
    import httpx

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the server did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", default="1,8,32,128")
    parser.add_argument("--duration-s", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--torch-threads", type=int, default=1, help="in the baseline and the server alike")
    args = parser.parse_args()
    torch.set_num_threads(args.torch_threads)
    counts = [int(c) for c in args.clients.split(",")]
    path = make_tiny_checkpoint(tempfile.mkdtemp())
    proc, url = _start_server(path, max(counts), args.torch_threads)
    rows = []
    try:
        asyncio.run(_server_run(url, 4, 1.0, seed=99, pid=proc.pid))  # warm-up
        for clients in counts:
            runs, server, baseline = [], [], EngineLoop(path, clients)
            for rep in range(args.repeats):  # alternate baseline and server
                runs.append(baseline.run(args.duration_s, seed=rep))
                server.append(asyncio.run(_server_run(url, clients, args.duration_s, seed=rep, pid=proc.pid)))
            rows.append(_row(clients, runs, server))
            print(json.dumps(rows[-1]))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    meta = machine("cpu") | {
        "cpu_model": _cpu_model(),
        "duration_s": args.duration_s,
        "repeats": args.repeats,
        "prompt_tokens": PROMPT_TOKENS,
        "max_tokens": MAX_TOKENS,
    }
    _print_table(rows, meta)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "serve.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))


def _row(clients: int, baseline: list[dict], server: list[dict]) -> dict:
    server_tps = statistics.median(s["tok_s"] for s in server)
    engine = statistics.median(b["tok_s"] for b in baseline)
    server_cpu = statistics.median(s["cpu_us_per_token"] for s in server)
    engine_cpu = statistics.median(b["cpu_us_per_token"] for b in baseline)
    ttft = [x for s in server for x in s["ttft"]]
    health = [x for s in server for x in s["health"]]
    return {
        "clients": clients,
        "server_tok_s": round(server_tps, 1),
        "engine_tok_s": round(engine, 1),
        "wall_overhead_pct": round(100 * (engine / server_tps - 1), 1),
        "server_cpu_us_per_token": round(server_cpu),
        "engine_cpu_us_per_token": round(engine_cpu),
        "cpu_overhead_pct": round(100 * (server_cpu / engine_cpu - 1), 1),
        "client_cpu_us_per_token": round(statistics.median(s["client_cpu_us_per_token"] for s in server)),
        "ttft_p50_ms": round(1000 * _pct(ttft, 0.5), 1),
        "ttft_p99_ms": round(1000 * _pct(ttft, 0.99), 1),
        "health_p50_ms": round(1000 * _pct(health, 0.5), 1),
        "health_p99_ms": round(1000 * _pct(health, 0.99), 1),
        "health_probes": len(health),
    }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown"


_COLUMNS = (("clients", "clients"), ("server tok/s", "server_tok_s"), ("engine tok/s", "engine_tok_s"),
            ("wall overhead %", "wall_overhead_pct"), ("server CPU us/token", "server_cpu_us_per_token"),
            ("engine CPU us/token", "engine_cpu_us_per_token"), ("CPU overhead %", "cpu_overhead_pct"),
            ("client CPU us/token", "client_cpu_us_per_token"),
            ("TTFT p50 ms", "ttft_p50_ms"), ("TTFT p99 ms", "ttft_p99_ms"),
            ("/health p50 ms", "health_p50_ms"), ("/health p99 ms", "health_p99_ms"))  # fmt: skip


def _print_table(rows: list[dict], meta: dict) -> None:
    print(f"\nserve ({', '.join(f'{k}={v}' for k, v in meta.items())}, cores={os.cpu_count()})")
    print("| " + " | ".join(title for title, _ in _COLUMNS) + " |")
    print("|" + "---|" * len(_COLUMNS))
    for r in rows:
        print("| " + " | ".join(str(r[key]) for _, key in _COLUMNS) + " |")


if __name__ == "__main__":
    main()
