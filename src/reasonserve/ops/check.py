"""``reasonserve check-determinism``: sweep every op on this machine and give a verdict.

For each random case ``(M, K, N)`` and each op, one row ``x`` is computed alone and
inside a batch of ``M`` rows at a random slot (the other rows random, one of them
NaN/inf junk); the two must be bitwise equal. With several instruction-set variants
available, the batch is also run under each variant and must match the first bit for
bit. The answer to a user's first question on a new box: is this machine giving
batch-invariant, cross-ISA-identical results?
"""

from __future__ import annotations

import os
import platform
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

import torch

from reasonserve.ops import _native
from reasonserve.ops.attention import decode_attention
from reasonserve.ops.matmul import k_major, linear, matmul
from reasonserve.ops.mean import mean
from reasonserve.ops.rms_norm import rms_norm
from reasonserve.ops.softmax import log_softmax, softmax

__all__ = ["OPS", "SweepReport", "cpu_model", "print_verdict", "run_sweep"]

# The widths where AVX2 and AVX-512 kernels have been seen to sum a row by its slot.
_ODD_WIDTHS = (5, 6, 7, 9, 10, 11)
_MAX_DIM = 300


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _dim(rng: random.Random) -> int:
    return rng.choice(_ODD_WIDTHS) if rng.random() < 0.3 else rng.randint(1, _MAX_DIM)


def _batch(row: torch.Tensor, m: int, slot: int, gen: torch.Generator) -> torch.Tensor:
    batch = torch.randn((m, *row.shape), generator=gen).to(row.dtype)
    if m > 1:
        junk = (slot + 1) % m
        batch[junk] = float("nan")
        batch[junk, ..., :1] = float("inf")
    batch[slot] = row
    return batch


def _row_op(fn: Callable[[torch.Tensor], torch.Tensor]):
    def case(m, k, n, slot, dtype, gen):
        x = torch.randn(k, generator=gen).to(dtype)
        return fn(x[None])[0], lambda: fn(_batch(x, m, slot, gen))[slot]

    return case


def _attention_case(m, k, n, slot, dtype, gen):
    d, length = max(1, k % 129), 1 + n % 97
    q = torch.randn(m, 4, d, generator=gen).to(dtype)
    kc, vc = (torch.randn(m, 2, length + 3, d, generator=gen).to(dtype) for _ in range(2))
    lens = torch.randint(1, length + 1, (m,), generator=gen)
    one = slice(slot, slot + 1)
    alone = decode_attention(q[one], kc[one, :, :length], vc[one, :, :length], lens[one])
    return alone[0], lambda: decode_attention(q, kc, vc, lens)[slot]


def _weights(k: int, n: int, dtype, gen):
    return (torch.randn(n, k, generator=gen) / k**0.5).to(dtype)


def _linear_case(layout):
    def case(m, k, n, slot, dtype, gen):
        w = _weights(k, n, dtype, gen)
        w = k_major(w) if layout == "k_major" else w
        return _row_op(lambda x: linear(x, w))(m, k, n, slot, dtype, gen)

    return case


def _matmul_case(m, k, n, slot, dtype, gen):
    b = _weights(n, k, dtype, gen)
    return _row_op(lambda x: matmul(x, b))(m, k, n, slot, dtype, gen)


def _rms_case(m, k, n, slot, dtype, gen):
    w = torch.randn(k, generator=gen).to(dtype)
    return _row_op(lambda x: rms_norm(x, w))(m, k, n, slot, dtype, gen)


#: op name -> case builder ``(M, K, N, slot, dtype, generator) -> (alone, batched_fn)``
OPS: dict[str, Callable] = {
    "linear": _linear_case("row_major"),
    "linear_k_major": _linear_case("k_major"),
    "matmul": _matmul_case,
    "rms_norm": _rms_case,
    "softmax": _row_op(lambda x: softmax(x, -1)),
    "log_softmax": _row_op(lambda x: log_softmax(x, -1)),
    "mean": _row_op(lambda x: mean(x, -1)),
    "decode_attention": _attention_case,
}


@dataclass
class SweepReport:
    cases: int = 0
    checks: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    isa_mismatches: dict[str, int] = field(default_factory=dict)
    first_failure: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not any(self.failures.values()) and not any(self.isa_mismatches.values())


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape:
        return False
    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def _under_isa(isa: str, fn):
    old = os.environ.get(_native.ISA_ENV)
    os.environ[_native.ISA_ENV] = isa
    try:
        return fn()
    finally:
        if old is None:
            os.environ.pop(_native.ISA_ENV, None)
        else:
            os.environ[_native.ISA_ENV] = old


def _check_case(report: SweepReport, name: str, case, rng: random.Random, dtype, isas) -> None:
    m, k, n = rng.randint(1, 64), _dim(rng), _dim(rng)
    slot = rng.randrange(m)
    gen = torch.Generator().manual_seed(rng.getrandbits(31))
    alone, batched = case(m, k, n, slot, dtype, gen)
    outs = [_under_isa(isa, batched) for isa in isas] if isas else [batched()]
    report.checks += 1
    if not _same(alone, outs[0]):
        report.failures[name] = report.failures.get(name, 0) + 1
        report.first_failure = report.first_failure or f"{name} {dtype} M={m} K={k} N={n} slot={slot}"
    for isa, out in zip(isas[1:], outs[1:], strict=False):
        if not _same(outs[0], out):
            report.isa_mismatches[isa] = report.isa_mismatches.get(isa, 0) + 1


def run_sweep(cases: int = 2000, seed: int = 0, *, dtypes=(torch.float32, torch.bfloat16),
              ops: tuple[str, ...] | None = None, all_isas: bool = True,
              progress: Callable[[int, int, str], None] | None = None) -> SweepReport:  # fmt: skip
    """Run ``cases`` random ``(M, K, N)`` cases of every op (and dtype); see the module doc.

    ``progress(done, total, what)`` is called after each case.
    """
    rng = random.Random(seed)
    names = ops or tuple(OPS)
    isas = _native.available_isas() if all_isas else ()
    report = SweepReport(failures=dict.fromkeys(names, 0))
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(cases):
            for name in names:
                _check_case(report, name, OPS[name], rng, rng.choice(dtypes), isas)
            report.cases += 1
            if progress is not None:
                progress(report.cases, cases, "cases")
    report.seconds = time.perf_counter() - start
    return report


def print_verdict(cases: int, seed: int, out: TextIO,
                  progress: Callable[[int, int, str], None] | None = None) -> int:  # fmt: skip
    """Run the sweep, print what was checked and the verdict; 0 when every check held."""
    if cases < 1:
        print("reasonserve check-determinism: error: --cases must be >= 1", file=out)
        return 2
    isas = _native.available_isas()
    print(f"CPU: {cpu_model()}; torch {torch.__version__}; threads {torch.get_num_threads()}", file=out)
    if isas:
        print(f"native kernels: loaded; instruction sets compared: {', '.join(isas)}", file=out)
    else:
        print(f"native kernels: not built ({_native.load_error()}); checking their torch transcription",
              file=out)  # fmt: skip
    report = run_sweep(cases, seed, progress=progress)
    done = f"{report.cases} cases x {len(OPS)} ops = {report.checks} checks"
    print(f"{done} in {report.seconds:.1f} s", file=out)
    for name, bad in report.failures.items():
        print(f"  {name:18s} {'ok' if not bad else f'{bad} rows differ from the row alone'}", file=out)
    for isa, bad in report.isa_mismatches.items():
        print(f"  {isa} differs from {isas[0]} in {bad} checks", file=out)
    if report.first_failure:
        print(f"first failure: {report.first_failure}", file=out)
    verdict = "batch-invariant" if report.ok else "NOT batch-invariant"
    same = f", identical bits across {', '.join(isas)}" if len(isas) > 1 and report.ok else ""
    print(f"VERDICT: {verdict} on this machine{same}", file=out)
    return 0 if report.ok else 1
