"""Shared benchmark harness: same-process baselines, medians, table + JSON + PNG.

Every benchmark compares a candidate with a baseline measured in the same process,
alternating the two so drift (thermal, other load) hits both alike, and reports the
ratio of medians. Absolute times are for context only.
"""

from __future__ import annotations

import json
import pathlib
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from reasonserve.progress import track

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Row:
    op: str
    shape: str
    baseline: str
    baseline_ms: float
    candidate_ms: float
    ratio: float  # candidate / baseline: below 1 is faster
    target: float | None = None

    @property
    def met(self) -> bool | None:
        return None if self.target is None else self.ratio <= self.target


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def median_s(
    fn: Callable[[], object], *, repeats: int = 30, device: str = "cpu", label: str = "timing"
) -> float:
    """Median seconds of ``fn`` after one warm-up call (a progress bar on a terminal)."""
    fn()
    times = []
    for _ in track(range(repeats), label, unit="repeats"):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def compare(
    baseline: Callable[[], object],
    candidate: Callable[[], object],
    *,
    device: str,
    repeats: int = 7,
    warmup: int = 2,
    label: str = "timing",
) -> tuple[float, float]:
    """Median seconds of ``baseline`` and ``candidate``, measured alternately (a progress
    bar on a terminal)."""
    for _ in range(warmup):
        baseline()
        candidate()
    times: dict[str, list[float]] = {"b": [], "c": []}
    for _ in track(range(repeats), label, unit="alternated repeats"):
        for key, fn in (("b", baseline), ("c", candidate)):
            _sync(device)
            start = time.perf_counter()
            fn()
            _sync(device)
            times[key].append(time.perf_counter() - start)
    return statistics.median(times["b"]), statistics.median(times["c"])


def _cpu_model() -> str:
    try:
        from reasonserve.ops.check import cpu_model

        return cpu_model()
    except ImportError:
        return platform.processor() or platform.machine()


def machine(device: str) -> dict:
    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu": _cpu_model(),
        "threads": torch.get_num_threads(),
        "device": device,
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def report(name: str, rows: list[Row], meta: dict, out_dir: pathlib.Path = RESULTS) -> None:
    """Print the table and write ``<name>.json`` and ``<name>.png`` under ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"\n{name}  ({', '.join(f'{k}={v}' for k, v in meta.items())})")
    print(f"{'op':<18} {'shape':<28} {'baseline':<20} {'base ms':>9} {'ours ms':>9} {'ratio':>7} target")
    for r in rows:
        verdict = "" if r.target is None else f"<= {r.target:g} {'met' if r.met else 'MISSED'}"
        print(f"{r.op:<18} {r.shape:<28} {r.baseline:<20} {r.baseline_ms:>9.3f} "
              f"{r.candidate_ms:>9.3f} {r.ratio:>7.2f} {verdict}")  # fmt: skip
    payload = {"meta": meta, "rows": [asdict(r) | {"met": r.met} for r in rows]}
    (out_dir / f"{name}.json").write_text(json.dumps(payload, indent=2))
    _plot(name, rows, out_dir / f"{name}.png")


def _plot(name: str, rows: list[Row], path: pathlib.Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib missing: no PNG)")
        return
    fig, ax = plt.subplots(figsize=(10, 0.35 * len(rows) + 1.5))
    labels = [f"{r.op} {r.shape}" for r in rows]
    colors = ["tab:red" if r.met is False else "tab:blue" for r in rows]
    ax.barh(labels, [r.ratio for r in rows], color=colors)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("time ratio: reasonserve / stock torch (lower is better)")
    ax.set_title(name)
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"wrote {path}")
