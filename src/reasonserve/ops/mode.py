"""``deterministic_mode()``: swap batch-invariant ops in for ATen ops.

Inside the context manager, the ATen ops listed in :data:`OVERRIDDEN_OPS` run the
reasonserve implementations for CPU and CUDA tensors, so unmodified model code
(``torch.nn.functional``, ``transformers`` models) computes each batch row with bits
that do not depend on the rest of the batch.

How it works: while at least one context in the process is active, kernels for those
ops are registered with ``torch.library`` for the CPU and CUDA dispatch keys. Each
kernel asks a ``ContextVar`` whether *its caller's* context is in deterministic mode:
yes -> the batch-invariant op, no (another thread, or an op the invariant op itself
calls) -> the stock ATen kernel through the op's ``out=`` overload, which the override
leaves untouched. Leaving the outermost context in the process removes the
registrations, so stock behaviour is restored exactly.

The mode nests, survives exceptions (try/finally), and is per thread / per asyncio
task: a new thread starts outside the mode even while another thread is inside it.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable, Iterator
from contextvars import ContextVar

import torch

from reasonserve.ops.activation import silu
from reasonserve.ops.matmul import matmul
from reasonserve.ops.mean import mean
from reasonserve.ops.softmax import log_softmax, softmax

__all__ = ["OVERRIDDEN_OPS", "deterministic_mode", "is_deterministic_mode"]

_DEPTH: ContextVar[int] = ContextVar("reasonserve_deterministic_depth", default=0)
# True while a batch-invariant kernel runs: ATen ops it calls take the stock path.
_IN_KERNEL: ContextVar[bool] = ContextVar("reasonserve_in_invariant_kernel", default=False)

_aten = torch.ops.aten


def _out(op, *args, dtype=None, **kwargs):
    """Run a stock ATen ``.out`` overload into a fresh tensor it resizes."""
    like = args[0]
    return op(*args, out=like.new_empty(0, dtype=dtype or like.dtype), **kwargs)


def _addmm(bias, m1, m2, *, beta=1, alpha=1):
    prod = matmul(m1, m2)
    prod = prod if alpha == 1 else prod * alpha
    if beta == 0:
        return prod.expand(m1.shape[:-1] + m2.shape[-1:]).clone()
    return prod + (bias if beta == 1 else bias * beta)


def _softmax(x, dim, half_to_float):
    return softmax(x.float() if half_to_float else x, dim)


def _log_softmax(x, dim, half_to_float):
    return log_softmax(x.float() if half_to_float else x, dim)


def _mean_dim(x, dim, keepdim=False, *, dtype=None):
    x = x if dtype is None else x.to(dtype)
    return mean(x, None if dim is None else list(dim), keepdim)


def _stock_mean_dim(x, dim, keepdim=False, *, dtype=None):
    return _out(_aten.mean.out, x, dim, keepdim, dtype=dtype or x.dtype)


def _stock_softmax(op):
    def run(x, dim, half_to_float):
        return _out(op, x, dim, half_to_float, dtype=torch.float32 if half_to_float else x.dtype)

    return run


def _stock_scaled(op):
    def run(c, a, b, *, beta=1, alpha=1):
        return _out(op, c, a, b, beta=beta, alpha=alpha)

    return run


# name -> (batch-invariant kernel, stock kernel with the same signature)
_KERNELS: dict[str, tuple[Callable, Callable]] = {
    "mm": (matmul, lambda a, b: _out(_aten.mm.out, a, b)),
    "bmm": (matmul, lambda a, b: _out(_aten.bmm.out, a, b)),
    "addmm": (_addmm, _stock_scaled(_aten.addmm.out)),
    "baddbmm": (_addmm, _stock_scaled(_aten.baddbmm.out)),
    "_softmax": (_softmax, _stock_softmax(_aten._softmax.out)),
    "_log_softmax": (_log_softmax, _stock_softmax(_aten._log_softmax.out)),
    "mean.dim": (_mean_dim, _stock_mean_dim),
    "silu": (silu, lambda x: _out(_aten.silu.out, x)),
}

#: The ATen ops replaced inside :func:`deterministic_mode`.
OVERRIDDEN_OPS: tuple[str, ...] = tuple(_KERNELS)


def _route(invariant: Callable, stock: Callable) -> Callable:
    def kernel(*args, **kwargs):
        if _DEPTH.get() == 0 or _IN_KERNEL.get():
            return stock(*args, **kwargs)
        token = _IN_KERNEL.set(True)
        try:
            return invariant(*args, **kwargs)
        finally:
            _IN_KERNEL.reset(token)

    return kernel


class _Registrations:
    """Reference-counted ``torch.library`` registrations, shared by all threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._library: torch.library.Library | None = None

    def acquire(self) -> None:
        with self._lock:
            if self._users == 0:
                self._library = self._register()
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._library is not None:
                # Library._destroy is how torch itself drops a Library's kernels.
                self._library._destroy()
                self._library = None

    @staticmethod
    def _register() -> torch.library.Library:
        library = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():
            # Overriding the stock kernels is the point; torch warns about it once.
            warnings.filterwarnings("ignore", message=".*[Oo]verrid.*")
            for name, (invariant, stock) in _KERNELS.items():
                for key in ("CPU", "CUDA"):
                    library.impl(name, _route(invariant, stock), key)
        return library


_REGISTRATIONS = _Registrations()


def is_deterministic_mode() -> bool:
    """Whether the calling thread / task is inside :func:`deterministic_mode`."""
    return _DEPTH.get() > 0


@contextlib.contextmanager
def deterministic_mode() -> Iterator[None]:
    """Run ATen matmul/softmax/mean/silu ops batch-invariantly inside the block.

    Example
    -------
    >>> import torch, reasonserve
    >>> x, w = torch.randn(5, 8), torch.randn(3, 8)
    >>> with reasonserve.deterministic_mode():
    ...     full = torch.nn.functional.linear(x, w)
    ...     alone = torch.nn.functional.linear(x[2:3], w)
    >>> torch.equal(full[2:3], alone)
    True
    """
    _REGISTRATIONS.acquire()
    token = _DEPTH.set(_DEPTH.get() + 1)
    try:
        yield
    finally:
        _DEPTH.reset(token)
        _REGISTRATIONS.release()
