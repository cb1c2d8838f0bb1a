"""The fixed-order C++ kernels (``reasonserve._C``): loading, instruction-set choice, calls.

The extension is built at install time (``setup.py``), never while an op runs. When it
is missing (no C++ compiler, an isolated build without torch), :func:`available` is
False and :func:`ops` hands out :mod:`._native_torch`, the same kernels written with
torch element-wise ops: the same bits, much slower; :func:`warn_fallback` says so once
per process, with the command that builds the extension.

Instruction set: the best one this CPU supports, or the one named by the environment
variable ``REASONSERVE_CPU_ISA`` (``generic``, ``avx2``, ``avx512``; read at each call,
never at import) — every variant gives identical bits, so forcing one changes speed
only. Tests use it to compare the variants on one machine.
"""

from __future__ import annotations

import functools
import importlib
import os
import threading
import warnings
from collections.abc import Callable

import torch

from reasonserve.core.errors import ImplementationUnavailableError
from reasonserve.ops import _native_torch

__all__ = ["ISAS", "ISA_ENV", "available", "available_isas", "load_error", "ops", "selected_isa"]

#: Instruction-set variants, by the index the C++ ops take.
ISAS = ("generic", "avx2", "avx512")
ISA_ENV = "REASONSERVE_CPU_ISA"
#: What builds the extension in a source checkout (docs/determinism.md).
BUILD_COMMAND = "pip install --no-build-isolation -e .  (or: python setup.py build_ext --inplace)"
_LOCK = threading.Lock()
_STATE: dict[str, object] = {}


def _register_fakes() -> None:
    """Shape-only implementations, so ``torch.compile`` / ``torch.export`` trace through."""
    lib = "reasonserve::"
    fakes: dict[str, Callable[..., torch.Tensor]] = {
        # [M, 16 * panels] computed, the first n columns returned (a view).
        "linear_packed": lambda x, panels, n, isa: x.new_empty_strided(
            (x.shape[0], n), (panels.shape[0] * 16, 1)
        ),
        "matmul_rows": lambda a, b, isa: a.new_empty_strided(
            (a.shape[0], b.shape[1]), (-(-b.shape[1] // 16) * 16, 1)
        ),
        "bmm_rows": lambda a, b, isa: a.new_empty_strided(
            (a.shape[0], a.shape[1], b.shape[2]),
            (a.shape[1] * -(-b.shape[2] // 16) * 16, -(-b.shape[2] // 16) * 16, 1),
        ),
        "rms_norm": lambda x, eps, isa: torch.empty_like(x),
        "softmax": lambda x, log, isa: torch.empty_like(x),
        "mean": lambda x, isa: x.new_empty((x.shape[0],)),
        "paged_attention": lambda q, k, v, tables, seq, keys, scale, isa: torch.empty_like(q),
    }
    for name, fake in fakes.items():
        torch.library.register_fake(lib + name, fake)


def _load() -> bool:
    if "ok" in _STATE:  # every op call asks: no lock once the answer is known
        return bool(_STATE["ok"])
    with _LOCK:
        if "ok" in _STATE:
            return bool(_STATE["ok"])
        try:
            importlib.import_module("reasonserve._C")
            _register_fakes()
            _STATE["ok"] = True
        except ImportError as err:  # not built, or built against another torch
            _STATE["error"] = f"reasonserve._C not built ({err})"
            _STATE["ok"] = False
        return bool(_STATE["ok"])


def available() -> bool:
    """Whether the compiled kernels loaded in this process (loads them on first call)."""
    return _load()


def load_error() -> str | None:
    """Why the compiled kernels are unavailable (None when they loaded)."""
    return None if available() else str(_STATE.get("error"))


@functools.cache
def available_isas() -> tuple[str, ...]:
    """Instruction-set variants this build and CPU can run, e.g. ``("generic", "avx2")``."""
    if not available():
        return ()
    return tuple(ISAS[i] for i in torch.ops.reasonserve.isas())


def selected_isa() -> int:
    """Index of the variant to run: ``$REASONSERVE_CPU_ISA`` when set, else the best one.

    Without the extension, the torch transcription runs the generic variant's order.
    """
    names = available_isas() or ("generic",)
    wanted = os.environ.get(ISA_ENV, "").strip().lower()
    if not wanted or wanted == "auto":
        return ISAS.index(names[-1])
    if wanted not in names:
        raise ImplementationUnavailableError(
            f"{ISA_ENV}={wanted!r}: this CPU/build supports {', '.join(names) or 'no native kernels'}"
        )
    return ISAS.index(wanted)


def warn_fallback() -> None:
    """Warn once per process that CPU ops run the kernels' slow torch transcription."""
    with _LOCK:
        if _STATE.get("warned"):
            return
        _STATE["warned"] = True
    warnings.warn(
        f"reasonserve: compiled CPU kernels unavailable ({_STATE.get('error')}); the ops run their "
        f"torch transcription: the same bits, much slower. Build them: {BUILD_COMMAND}",
        RuntimeWarning,
        stacklevel=4,
    )


def ops():
    """``torch.ops.reasonserve`` once the kernels are loaded, else their torch transcription."""
    if available():
        return torch.ops.reasonserve
    warn_fallback()
    return _native_torch
