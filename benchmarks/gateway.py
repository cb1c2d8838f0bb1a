"""The reasoning gateway's cost: CPU per chunk, end-to-end overhead, /health under load.

Usage: ``python benchmarks/gateway.py [--repeats 31] [--programs 32]``.

``reasonserve serve`` (the chain checkpoint of ``tests/_gateway.py``: known outputs, an
endless reasoning after ``~``) and ``reasonserve gateway`` run in subprocesses on
loopback ports. Three measurements, machine printed:

* **end to end**: one CoT program with probes (64-token chunks, exit once 8 probes
  agree: 8 chunks, 8 probes, an aborted ninth chunk) run by :class:`CoTWithProbe` in
  this process straight on the upstream (:class:`HTTPClient`, the baseline) and the same
  program through the gateway (``/v1/completions`` with that ``early_exit``), alternated;
  medians and their ratio (goal <= 1.05), with the median of the pairs' ratios and the
  ratio of the fastest runs (on a shared machine single runs vary by 2-3x);
* **gateway CPU per chunk**: the gateway process's CPU time (all threads, from
  ``/proc/<pid>/task/*/schedstat``, nanoseconds) over each gateway request above,
  divided by its chunks (each chunk is two upstream requests, the chunk and its probe),
  beside the CPU the same program takes run directly (this process, its HTTP client
  included): the difference is what the gateway adds per chunk; and over streamed
  requests (early exit off), per upstream stream chunk relayed; p50 (goal <= 1 ms);
* **/health under load**: ``--programs`` programs streaming at once (early exit off,
  endless reasoning) while another process polls ``/health`` (the gateway's, and the
  upstream's for context); p50/p99 (goal p99 <= 50 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent / "tests"))  # the chain checkpoint of the gateway tests

import httpx  # noqa: E402

from _gateway import THINK_END, token_id, write_chain_checkpoint  # noqa: E402
from _harness import RESULTS, machine  # noqa: E402
from reasonserve.certainindex import AgreeSpanRule  # noqa: E402
from reasonserve.clients import OpenAIShim  # noqa: E402
from reasonserve.clients.http import HTTPClient  # noqa: E402
from reasonserve.programs import CoTWithProbe  # noqa: E402

PROMPT = "Think it through ~"  # ends in "~": the chain model reasons until the program stops it
CHUNK, AGREE, MAX_TOKENS = 64, 8, 4000


def cpu_ns(pid: int) -> int:
    """CPU time of every thread of ``pid`` so far, in nanoseconds (scheduler statistics)."""
    total = 0
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended meanwhile
    return total


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(argv: list[str], url: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "reasonserve", *argv],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"{argv[0]} did not start")


def _program() -> CoTWithProbe:
    return CoTWithProbe(
        chunk_tokens=CHUNK,
        max_tokens=MAX_TOKENS,
        rule=AgreeSpanRule(k_probes=AGREE, min_tokens=0),
        stop=(THINK_END,),
    )


async def _direct(client: HTTPClient, cpu: list[float]) -> float:
    start, before = time.perf_counter(), time.process_time()
    out = await _program().run(client, PROMPT)
    elapsed = time.perf_counter() - start
    assert out.trace.exit == "early" and out.trace.num_probes == AGREE
    cpu.append((time.process_time() - before) * 1e3 / AGREE)  # this process: the program and its client
    return elapsed


async def _through(gateway: httpx.AsyncClient, pid: int, cpu: list[float]) -> float:
    body = {
        "prompt": PROMPT,
        "max_tokens": MAX_TOKENS,
        "early_exit": {"probe_interval_tokens": CHUNK, "agreement": AGREE},
    }
    start, before = time.perf_counter(), cpu_ns(pid)
    r = await gateway.post("/v1/completions", json=body)
    elapsed = time.perf_counter() - start
    info = r.json()["reasonserve"]
    assert info["exit"] == "early" and info["num_probes"] == AGREE, r.text
    cpu.append((cpu_ns(pid) - before) / 1e6 / AGREE)  # ms per chunk (each with its probe)
    return elapsed


async def end_to_end(upstream: str, gateway: str, pid: int, repeats: int) -> dict:
    direct, through, cpu, direct_cpu = [], [], [], []
    gw = httpx.AsyncClient(base_url=gateway, timeout=300)
    async with HTTPClient(upstream, OpenAIShim()) as client, gw:
        for _ in range(2):  # warm-up
            await _direct(client, [])
            await _through(gw, pid, [])
        for _ in range(repeats):
            direct.append(await _direct(client, direct_cpu))
            through.append(await _through(gw, pid, cpu))
    d, t = statistics.median(direct), statistics.median(through)
    gateway_cpu, program_cpu = statistics.median(cpu), statistics.median(direct_cpu)
    pairs = statistics.median(b / a for a, b in zip(direct, through, strict=True))
    return {"direct_s": d, "gateway_s": t, "ratio": t / d, "pair_ratio_p50": pairs,
            "min_ratio": min(through) / min(direct), "cpu_ms_per_chunk_p50": gateway_cpu,
            "direct_cpu_ms_per_chunk_p50": program_cpu,
            "added_cpu_ms_per_chunk": gateway_cpu - program_cpu}  # fmt: skip


async def streamed_cpu(gateway: str, pid: int, repeats: int, tokens: int = 400) -> float:
    """Gateway CPU per relayed stream chunk (one token each here), p50 over requests."""
    body = {"prompt": PROMPT, "max_tokens": tokens, "early_exit": "off", "stream": True}
    per_chunk = []
    async with httpx.AsyncClient(base_url=gateway, timeout=300) as gw:
        for _ in range(repeats):
            before, chunks = cpu_ns(pid), 0
            async with gw.stream("POST", "/v1/completions", json=body) as r:
                async for line in r.aiter_lines():
                    chunks += '"reasoning"' in line
            per_chunk.append((cpu_ns(pid) - before) / 1e6 / max(chunks, 1))
    return statistics.median(per_chunk)


# Polls /health of each URL in turn until stdin closes; prints each one's latencies (s) as JSON.
_POLLER = """
import json, sys, threading, time, httpx
urls, out, stop = sys.argv[1:], {u: [] for u in sys.argv[1:]}, threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
with httpx.Client(timeout=60) as client:
    while not stop.is_set():
        for url in urls:
            t = time.perf_counter()
            client.get(url + "/health").raise_for_status()
            out[url].append(time.perf_counter() - t)
        time.sleep(0.02)
print(json.dumps(out))
"""


async def health_under_load(gateway: str, upstream: str, programs: int, tokens: int = 600) -> dict:
    """/health of the gateway (and, for context, of the upstream) while ``programs`` stream,
    polled from another process so the streams' own client loop does not delay the polls."""
    body = {"prompt": PROMPT, "max_tokens": tokens, "early_exit": "off", "stream": True}
    limits = httpx.Limits(max_connections=programs + 8)
    async with httpx.AsyncClient(base_url=gateway, timeout=600, limits=limits) as gw:
        live, running = [0], asyncio.Event()

        async def stream() -> int:
            chunks = 0
            async with gw.stream("POST", "/v1/completions", json=body) as r:
                live[0] += 1
                if live[0] == programs:
                    running.set()
                async for line in r.aiter_lines():
                    chunks += '"reasoning"' in line
            return chunks

        streams = asyncio.gather(*(stream() for _ in range(programs)))
        await running.wait()
        poller = subprocess.Popen([sys.executable, "-c", _POLLER, gateway, upstream], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)  # fmt: skip
        chunks = await streams
        out, _ = poller.communicate("", timeout=120)
    polls = json.loads(out)
    gw_ms, up_ms = ([1e3 * v for v in polls[u]] for u in (gateway, upstream))
    return {"programs": programs, "polls": len(gw_ms), "chunks": sum(chunks),
            "health_p50_ms": pct(gw_ms, 0.5), "health_p99_ms": pct(gw_ms, 0.99),
            "upstream_health_p50_ms": pct(up_ms, 0.5),
            "upstream_health_p99_ms": pct(up_ms, 0.99)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=31)
    parser.add_argument("--programs", type=int, default=32)
    args = parser.parse_args()
    folder = write_chain_checkpoint(pathlib.Path(tempfile.mkdtemp()) / "chain")
    up_port, gw_port = _port(), _port()
    upstream, gateway = f"http://127.0.0.1:{up_port}", f"http://127.0.0.1:{gw_port}"
    up = _start(
        [
            "serve",
            "--model",
            str(folder),
            "--port",
            str(up_port),
            "--num-blocks",
            "4096",
            "--block-size",
            "16",
            "--max-num-seqs",
            str(args.programs + 8),
            "--max-tokens-limit",
            str(MAX_TOKENS),
            "--max-connections",
            "4096",
            "--end-of-thinking-token-id",
            str(token_id(THINK_END)),
        ],
        upstream,
    )
    gw = None
    try:
        gw = _start(
            [
                "gateway",
                "--upstream",
                upstream,
                "--upstream-kind",
                "reasonserve",
                "--tokenizer",
                str(folder),
                "--port",
                str(gw_port),
                "--max-tokens-limit",
                str(MAX_TOKENS),
            ],
            gateway,
        )
        e2e = asyncio.run(end_to_end(upstream, gateway, gw.pid, args.repeats))
        e2e["cpu_ms_per_stream_chunk_p50"] = asyncio.run(streamed_cpu(gateway, gw.pid, args.repeats))
        load = asyncio.run(health_under_load(gateway, upstream, args.programs))
    finally:
        for proc in (gw, up):
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=30)
    report = {
        "machine": machine("cpu") | {"loadavg_1min": os.getloadavg()[0]},
        "end_to_end": e2e,
        "health_under_load": load,
        "goals": {"ratio": 1.05, "cpu_ms_per_chunk_p50": 1.0, "health_p99_ms": 50.0},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "gateway.json").write_text(json.dumps(report, indent=2))
    m = report["machine"]
    print(f"gateway benchmark ({m['cpu']}, python {m['python']}, torch {m['torch']}, {args.repeats} repeats)")
    print(
        f"  CoT, {AGREE} x {CHUNK}-token chunks + probes: direct {e2e['direct_s']:.3f} s, "
        f"through the gateway {e2e['gateway_s']:.3f} s, ratio {e2e['ratio']:.3f} (goal <= 1.05); "
        f"median of the alternated pairs' ratios {e2e['pair_ratio_p50']:.3f}, of the fastest runs "
        f"{e2e['min_ratio']:.3f}"
    )
    print(
        f"  gateway CPU per CoT chunk (chunk + probe upstream) p50 {e2e['cpu_ms_per_chunk_p50']:.3f} ms; "
        f"the program run directly {e2e['direct_cpu_ms_per_chunk_p50']:.3f} ms in its own process; "
        f"added by the gateway {e2e['added_cpu_ms_per_chunk']:.3f} ms (goal <= 1 ms)\n"
        f"  gateway CPU per streamed chunk relayed p50 {e2e['cpu_ms_per_stream_chunk_p50']:.3f} ms "
        "(goal <= 1 ms)"
    )
    print(
        f"  /health while {load['programs']} programs stream: p50 {load['health_p50_ms']:.1f} ms, "
        f"p99 {load['health_p99_ms']:.1f} ms over {load['polls']} polls (goal p99 <= 50 ms); "
        f"the upstream's own /health meanwhile: p50 {load['upstream_health_p50_ms']:.1f} ms, "
        f"p99 {load['upstream_health_p99_ms']:.1f} ms"
    )
    print(f"  load average at the end: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
