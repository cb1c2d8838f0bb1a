"""Workloads replayed from the recorded serving traces in ``../shared/data/serving_traces``
(read at run time, never copied into the repository; see that folder's README).

* ``azure-code`` / ``azure-conv``: Azure LLM inference trace 2023 (``TIMESTAMP``,
  ``ContextTokens``, ``GeneratedTokens``).
* ``mooncake-conversation`` / ``mooncake-synthetic``: Mooncake traces (``timestamp`` in
  ms, ``input_length``, ``output_length``, ``hash_ids`` of 512-token prompt blocks).
* ``sharegpt``: ShareGPT prefill/decode token counts (lengths only, no times).

These traces come from non-reasoning services, so the output is split into a reasoning
and an answer part with a reason ratio drawn per request from the ServeGen DeepSeek-R1
production distribution (``reason_split="servegen"``, chunk 0 window 0, seeded), or all
answer (``"none"``). Arrivals are the recorded times (``arrivals="trace"``, gaps scaled
so the mean rate is ``rate_per_s``; the ordering and burstiness are the trace's) or a
Poisson process at ``rate_per_s`` (``"poisson"``). Mooncake's ``hash_ids`` become the
requests' chained per-block prefix hashes: each 512-token block id is spread over the
simulator's blocks inside it, so two requests share a hash exactly where the trace says
they share a prompt block. Rows with a prompt under one token or no output are skipped
and counted. Files are UTF-8 (a leading BOM is dropped); a line over 16 MiB, bytes that
are not UTF-8, a malformed row or a value out of range (a count over 10^8, a time that is
not finite) is an ``InvalidArgumentError`` naming the file and line.
"""

from __future__ import annotations

import ast
import bisect
import csv
import datetime
import json
import math
import pathlib
import random
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.sim.workloads.requests import SimRequest

__all__ = ["TRACE_SOURCES", "TraceRow", "load_trace", "trace_workload"]

_MOONCAKE_BLOCK = 512
_MAX_ROWS = 1_000_000
_MAX_LINE_BYTES = 1 << 24
_MAX_ABS_MS = 1e15  # Mooncake timestamps (ms): about 30,000 years either way
TRACE_SOURCES = {
    "azure-code": "azure_llm_2023/AzureLLMInferenceTrace_code.csv",
    "azure-conv": "azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
    "mooncake-conversation": "mooncake_fast25/conversation_trace.jsonl",
    "mooncake-synthetic": "mooncake_fast25/synthetic_trace.jsonl",
    "sharegpt": "sharegpt_lengths/sharegpt_8k_filtered_stats_llama2_tokenizer.csv",
}


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One recorded request: arrival (s from the trace's start; None: not recorded)."""

    arrival_s: float | None
    prompt_tokens: int
    output_tokens: int
    block_ids: tuple[int, ...] = ()


def _count(value: object, where: str) -> int:
    try:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise TypeError
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InvalidArgumentError(f"{where}: not a token count: {str(value)[:40]!r}") from None
    if not number >= 0 or number > 10**8 or number != int(number):  # NaN, inf fail before int()
        raise InvalidArgumentError(f"{where}: not a token count: {str(value)[:40]!r}")
    return int(number)


def _lines(path: pathlib.Path, f: BinaryIO) -> Iterator[str]:
    """The file's lines as text (a leading BOM dropped), each read with bounded memory."""
    for line_no, raw in enumerate(iter(lambda: f.readline(_MAX_LINE_BYTES + 1), b""), start=1):
        if len(raw) > _MAX_LINE_BYTES:
            raise InvalidArgumentError(f"{path}:{line_no}: line longer than {_MAX_LINE_BYTES} bytes")
        try:
            yield raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
        except UnicodeDecodeError:
            raise InvalidArgumentError(f"{path}:{line_no}: not UTF-8 text") from None


def _csv_rows(path: pathlib.Path, f: BinaryIO, *, header: bool = True) -> Iterator[tuple[str, Any]]:
    """``(where, record)`` for each CSV record (a dict under a header line, else a list);
    a malformed record is a typed error."""
    read = [0]  # lines handed to the CSV reader so far: the record's last line

    def counted() -> Iterator[str]:
        for line in _lines(path, f):
            read[0] += 1
            yield line

    reader = csv.DictReader(counted()) if header else csv.reader(counted())
    while True:
        try:
            rec = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise InvalidArgumentError(f"{path}:{read[0]}: {e}") from None
        yield f"{path}:{read[0]}", rec


def _azure(path: pathlib.Path) -> list[TraceRow]:
    rows, start = [], None
    with path.open("rb") as f:
        for where, rec in _csv_rows(path, f):
            try:
                t = datetime.datetime.fromisoformat(rec["TIMESTAMP"][:26]).timestamp()
            except (KeyError, TypeError, ValueError, OverflowError, OSError):
                raise InvalidArgumentError(f"{where}: bad or missing TIMESTAMP") from None
            start = t if start is None else start
            rows.append(TraceRow(t - start, _count(rec.get("ContextTokens"), where),
                                 _count(rec.get("GeneratedTokens"), where)))  # fmt: skip
            if len(rows) >= _MAX_ROWS:
                break
    return rows


def _block_ids(value: object, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(type(h) is int for h in value):
        raise InvalidArgumentError(f"{where}: hash_ids must be a list of integers")
    return tuple(value)


def _mooncake(path: pathlib.Path) -> list[TraceRow]:
    rows = []
    with path.open("rb") as f:
        for line_no, line in enumerate(_lines(path, f), start=1):
            where = f"{path}:{line_no}"
            try:
                rec = json.loads(line)
                ms = rec["timestamp"]
                if isinstance(ms, bool) or not isinstance(ms, (int, float)):
                    raise TypeError
                t, ids = float(ms) / 1000.0, _block_ids(rec.get("hash_ids", []), where)
            except (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError):
                raise InvalidArgumentError(f"{where}: not a Mooncake trace row") from None
            if not (math.isfinite(t) and abs(ms) <= _MAX_ABS_MS):
                raise InvalidArgumentError(f"{where}: timestamp out of range: {str(ms)[:40]!r}")
            rows.append(TraceRow(t, _count(rec.get("input_length"), where),
                                 _count(rec.get("output_length"), where), ids))  # fmt: skip
            if len(rows) >= _MAX_ROWS:
                break
    return rows


def _sharegpt(path: pathlib.Path) -> list[TraceRow]:
    rows = []
    with path.open("rb") as f:
        for where, rec in _csv_rows(path, f):
            rows.append(TraceRow(None, _count(rec.get("num_prefill_tokens"), where),
                                 _count(rec.get("num_decode_tokens"), where)))  # fmt: skip
            if len(rows) >= _MAX_ROWS:
                break
    return rows


def load_trace(source: str, data_dir: str | pathlib.Path) -> list[TraceRow]:
    """Every row of one recorded trace (in file order), checked; see the module docstring."""
    if source not in TRACE_SOURCES:
        raise InvalidArgumentError(f"trace source must be one of {sorted(TRACE_SOURCES)}, got {source!r}")
    path = pathlib.Path(data_dir) / "serving_traces" / TRACE_SOURCES[source]
    if not path.is_file():
        raise InvalidArgumentError(f"data_dir has no serving_traces/{TRACE_SOURCES[source]}: {data_dir}")
    family = source.split("-")[0]
    reader = {"azure": _azure, "mooncake": _mooncake, "sharegpt": _sharegpt}[family]
    return reader(path)


def _reason_ratios(data_dir: pathlib.Path) -> tuple[list[float], list[float]]:
    """ServeGen DeepSeek-R1 reason-ratio distribution (chunk 0, window 0): values, CDF."""
    path = data_dir / "serving_traces" / "servegen_deepseek_r1" / "chunk-0-dataset.json"
    if not path.is_file():
        raise InvalidArgumentError(f"reason_split='servegen' needs {path}")
    dist = ast.literal_eval(json.loads(path.read_text())["0"]["reason_ratio"])
    keys = sorted(float(k) for k, p in dist.items() if p > 0)
    acc, cdf = 0.0, []
    for k in keys:
        acc += dist[k]
        cdf.append(acc)
    return keys, [c / acc for c in cdf]


def _prefix_hashes(block_ids: tuple[int, ...], prompt_tokens: int, block_size: int) -> tuple[int, ...]:
    """Chained hashes of the prompt's full simulator blocks, from the trace's 512-token ids."""
    out, h = [], 0
    for i in range(prompt_tokens // block_size):
        outer = (i * block_size) // _MOONCAKE_BLOCK
        if outer >= len(block_ids):
            break
        h = zlib.crc32(f"{h}:{block_ids[outer]}:{i}".encode())
        out.append(h)
    return tuple(out)


def _arrivals(rows: list[TraceRow], mode: str, rate_per_s: float, rng: random.Random) -> list[float]:
    if mode == "poisson":
        t, out = 0.0, []
        for _ in rows:
            t += rng.expovariate(rate_per_s)
            out.append(t)
        return out
    recorded = [r.arrival_s for r in rows]
    if any(t is None for t in recorded):
        raise InvalidArgumentError("this trace records no arrival times: use arrivals='poisson'")
    known = [float(t) for t in recorded if t is not None]
    first, span = min(known), max(known) - min(known)
    if span <= 0:  # every request at one instant: keep it that way
        return [0.0] * len(rows)
    scale = (len(rows) - 1) / rate_per_s / span  # mean gap becomes 1 / rate_per_s
    return [(t - first) * scale for t in known]


def trace_workload(
    source: str, data_dir: str | pathlib.Path, rate_per_s: float, num_requests: int, seed: int, *,
    arrivals: str = "trace", reason_split: str = "servegen", block_size: int = 16,
    skipped: dict | None = None,
) -> list[SimRequest]:  # fmt: skip
    """The first ``num_requests`` usable rows of ``source`` as simulator requests."""
    if not rate_per_s > 0 or rate_per_s == float("inf"):
        raise InvalidArgumentError(f"rate_per_s must be a finite number > 0, got {rate_per_s!r}")
    if num_requests < 1:
        raise InvalidArgumentError(f"num_requests must be >= 1, got {num_requests}")
    if arrivals not in ("trace", "poisson") or reason_split not in ("servegen", "none"):
        raise InvalidArgumentError("arrivals must be 'trace' or 'poisson'; reason_split 'servegen' or 'none'")
    rows: list[TraceRow] = []
    unusable = 0
    for r in load_trace(source, data_dir):
        if len(rows) == num_requests:
            break
        if r.prompt_tokens >= 1 and r.output_tokens >= 1:
            rows.append(r)
        else:
            unusable += 1
    if skipped is not None:  # counted up to the last row used
        skipped["rows without prompt or output"] = unusable
        if len(rows) < num_requests:
            skipped["requests asked for past the trace's end"] = num_requests - len(rows)
    if not rows:
        raise InvalidArgumentError(f"{source}: no usable rows in {TRACE_SOURCES[source]}")
    rng = random.Random(seed)
    times = _arrivals(rows, arrivals, rate_per_s, rng)
    ratios = _reason_ratios(pathlib.Path(data_dir)) if reason_split == "servegen" else None
    out = []
    for i, (row, t) in enumerate(sorted(zip(rows, times, strict=True), key=lambda rt: rt[1])):
        reasoning = 0
        if ratios is not None:
            keys, cdf = ratios
            ratio = keys[min(bisect.bisect_left(cdf, rng.random()), len(keys) - 1)]
            reasoning = min(row.output_tokens - 1, round(row.output_tokens * ratio))
        hashes = _prefix_hashes(row.block_ids, row.prompt_tokens, block_size)
        out.append(SimRequest(f"r{i:06d}", t, row.prompt_tokens, reasoning, row.output_tokens - reasoning,
                              prefix_hashes=hashes))  # fmt: skip
    return out
