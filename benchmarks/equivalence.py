"""Answer equivalence on the recorded probe pairs: speed, and agreement with Math-Verify.

Usage: ``python benchmarks/equivalence.py [--data ../shared/data] [--no-reference]``.

* **pairs**: every distinct (probe answer, target) pair of ``<data>/probes/*``, the probe
  answer read with the replay rule (:func:`extract_probe_answer` on the recorded text);
  each pair is weighted by the probe rows it stands for.
* **speed** (targets: median <= 30 us, p99 <= 1 ms per pair): ``compare_answers`` on
  every distinct pair once, caches cleared first, ``gc.freeze()`` after imports; the
  baseline is Math-Verify's ``parse`` + ``verify`` in the same process, alternated pair
  by pair with ours on a sample (when ``math-verify`` is installed).
* **agreement** (target: disagreeing probe rows <= 0.3%): every distinct pair graded by
  Math-Verify in a worker process (:class:`ReferenceGrader`, 5 s hard timeout) and by
  ``equivalent``; disagreements are grouped by direction and answer shape.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import csv
import gc
import gzip
import json
import os
import pathlib
import random
import re
import statistics
import sys
import time

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _harness import RESULTS, machine
from reasonserve.certainindex import Verdict, compare_answers, extract_probe_answer
from reasonserve.certainindex.answers._values import parsed
from reasonserve.certainindex.answers.extract import _normalize_cached
from reasonserve.certainindex.answers.grading import ReferenceGrader, reference_grader_available
from reasonserve.progress import track

csv.field_size_limit(1 << 24)


def probe_pairs(data: pathlib.Path) -> collections.Counter:
    """Distinct (probe answer, target) pairs of every probe recording, with row counts."""
    pairs: collections.Counter = collections.Counter()
    for run in sorted((data / "probes").iterdir()):
        if not (run / "probes.csv.gz").is_file():
            continue
        targets = {}
        for line in (run / "labels.jsonl").read_text().splitlines():
            row = json.loads(line)
            targets[(str(row["dataset"]), str(row["problem_id"]))] = str(row["target"])
        with gzip.open(run / "probes.csv.gz", "rt", newline="") as fh:
            for row in csv.DictReader(fh):
                text = row.get("probe_text")
                answer = extract_probe_answer(text) if text else row.get("probe_answer", "")
                target = targets.get((row["dataset"], row["problem_id"]))
                if answer and target:
                    pairs[(answer, target)] += 1
    return pairs


def _clear_caches() -> None:
    _normalize_cached.cache_clear()
    parsed.cache_clear()


def _one_pass(pairs: list[tuple[str, str]]) -> tuple[list[float], list[float]]:
    """Sorted per-pair wall and thread-CPU times (us) over all pairs, caches cleared first."""
    _clear_caches()
    wall, cpu = [], []
    for a, b in pairs:
        start, start_cpu = time.perf_counter_ns(), time.thread_time_ns()
        compare_answers(a, b)
        cpu.append((time.thread_time_ns() - start_cpu) / 1e3)
        wall.append((time.perf_counter_ns() - start) / 1e3)
    return sorted(wall), sorted(cpu)


def _summary(passes: list[list[float]]) -> dict:
    p99s = [t[int(0.99 * (len(t) - 1))] for t in passes]
    return {
        "median_us": statistics.median(statistics.median(t) for t in passes),
        "p99_us": statistics.median(p99s),
        "p99_us_per_run": p99s,
        "max_us": statistics.median(t[-1] for t in passes),
    }


def speed(pairs: list[tuple[str, str]], runs: int = 5) -> dict:
    """Per-pair times over every distinct pair, caches cleared before each of ``runs`` passes.

    Reported: the median over passes of each pass's median, p99 and max, as wall time
    and as thread CPU time. On a shared, oversubscribed machine a pair's wall time
    includes the scheduler's time slices given to other processes (milliseconds);
    its CPU time does not.
    """
    passes = [_one_pass(pairs) for _ in track(range(runs), "equivalence speed", unit="passes")]
    return {
        "pairs": len(pairs),
        "runs": runs,
        "load_average_1m": os.getloadavg()[0],
        "wall": _summary([w for w, _ in passes]),
        "cpu": _summary([c for _, c in passes]),
    }


def versus_math_verify(pairs: list[tuple[str, str]], sample: int = 400) -> dict | None:
    """Ours and Math-Verify in this process, alternated pair by pair on the same sample."""
    if not reference_grader_available():
        return None
    from math_verify import parse, verify

    chosen = random.Random(0).sample(pairs, min(sample, len(pairs)))
    ours, theirs = [], []
    _clear_caches()
    for a, b in chosen:
        start = time.perf_counter_ns()
        compare_answers(a, b)
        ours.append(time.perf_counter_ns() - start)
        start = time.perf_counter_ns()
        with contextlib.suppress(Exception):  # a failure is a verdict too; only the time matters
            verify(parse(f"${b}$"), parse(f"${a}$"))
        theirs.append(time.perf_counter_ns() - start)
    p99 = sorted(theirs)[int(0.99 * (len(theirs) - 1))]
    return {
        "sample": len(chosen),
        "ours_median_us": statistics.median(ours) / 1e3,
        "math_verify_median_us": statistics.median(theirs) / 1e3,
        "math_verify_p99_us": p99 / 1e3,
        "ratio": statistics.median(ours) / statistics.median(theirs),
    }


_SHAPES = (
    ("integer", r"-?\d+"),
    ("decimal", r"-?\d*\.\d+"),
    ("matrix", r".*\\begin\{.?matrix\}.*"),
    ("interval/tuple", r"[(\[].*,.*[)\]]"),
    ("list/set", r".*,.*"),
    ("relation", r".*[<>=].*"),
    ("fraction/radical", r".*\\(?:d?frac|sqrt).*"),
    ("text", r".*\\text.*|[A-Za-z ]{4,}"),
    ("letter", r"\(?[A-Za-z]\)?"),
)


def shape(answer: str) -> str:
    """A coarse answer shape for grouping disagreements."""
    s = answer.replace(" ", "")
    for name, pattern in _SHAPES:
        if re.fullmatch(pattern, s):
            return name
    return "expression"


def agreement(pairs: collections.Counter, timeout_s: float = 5.0) -> dict:
    groups: dict = collections.defaultdict(lambda: {"pairs": 0, "rows": 0, "examples": []})
    rows_total, rows_differ, timeouts = sum(pairs.values()), 0, 0
    with ReferenceGrader(timeout_s=timeout_s) as reference:
        for (answer, target), rows in track(list(pairs.items()), "math-verify agreement", unit="pairs"):
            theirs = reference.grade(target, answer)
            if theirs is None:
                timeouts += 1
                continue
            verdict = compare_answers(answer, target)
            if (verdict is Verdict.EQUAL) == theirs:
                continue
            direction = f"math-verify equal, ours {verdict.value}" if theirs else "ours equal, m-v not"
            group = groups[f"{direction} | target {shape(target)}"]
            group["pairs"] += 1
            group["rows"] += rows
            rows_differ += rows
            if len(group["examples"]) < 4:
                group["examples"].append([answer[:80], target[:80], rows])
    ordered = dict(sorted(groups.items(), key=lambda kv: -kv[1]["rows"]))
    return {
        "distinct_pairs": len(pairs),
        "rows": rows_total,
        "rows_differ": rows_differ,
        "rows_differ_pct": 100 * rows_differ / rows_total,
        "pairs_differ": sum(g["pairs"] for g in groups.values()),
        "timeouts": timeouts,
        "groups": ordered,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_data = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data"
    parser.add_argument("--data", default=str(default_data))
    parser.add_argument("--no-reference", action="store_true", help="skip the Math-Verify agreement pass")
    args = parser.parse_args(argv)
    pairs = probe_pairs(pathlib.Path(args.data))
    distinct = list(pairs)
    gc.collect()
    gc.freeze()
    result: dict[str, object] = {"machine": machine("cpu"), "speed": speed(distinct)}
    result["vs_math_verify"] = versus_math_verify(distinct)
    print(json.dumps({k: result[k] for k in ("machine", "speed", "vs_math_verify")}, indent=2))
    if not args.no_reference and reference_grader_available():
        result["agreement"] = agreement(pairs)
        print(json.dumps(result["agreement"], indent=2))
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "equivalence.json" if "agreement" in result else "equivalence_speed.json"
    (RESULTS / name).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
