"""A bounds checker for the Triton interpreter: every unmasked load and store must fall
inside the storage of a tensor passed to the kernel.

The interpreter dereferences raw host addresses: an access just past a tensor reads or
writes whatever memory lies there, silently, and only a far one crashes the process. This
checker records the storages of each launch's tensor arguments (on CPU the interpreter
runs on them in place) and checks every address of every load and store, so a kernel
that loses a clamp fails with the offending address instead of corrupting memory.

It also counts the loads of a launch: with ``max_loads_per_launch`` set, a launch that
issues more (a program walking a length it should have clamped) fails at once — a bound
on work, where waiting for it would hang the test.
"""

from __future__ import annotations

import numpy as np


class OutOfBoundsAccess(AssertionError):
    """An interpreted kernel touched memory outside every tensor it was given."""


class _Checked:
    """Stands in for ``triton._C.libtriton.interpreter``: checks, then delegates."""

    def __init__(self, real, ranges: list[tuple[int, int]]):
        self._real, self._ranges = real, ranges
        self.loads = 0
        self.max_loads_per_launch: int | None = None

    def __getattr__(self, name):
        return getattr(self._real, name)

    def _check(self, what: str, ptrs: np.ndarray, mask: np.ndarray, itemsize: int) -> None:
        addresses = np.broadcast_to(ptrs, np.broadcast_shapes(ptrs.shape, mask.shape))
        used = addresses[np.broadcast_to(mask, addresses.shape).astype(bool)].astype(np.uint64)
        inside = np.zeros(used.shape, dtype=bool)
        for start, end in self._ranges:
            inside |= (used >= start) & (used + np.uint64(itemsize) <= end)
        if not inside.all():
            stray = int(used[~inside][0])
            spans = ", ".join(f"[{s:#x}, {e:#x})" for s, e in self._ranges)
            raise OutOfBoundsAccess(f"{what} at {stray:#x}, outside every argument's storage: {spans}")

    def load(self, ptrs, mask, other, dtype):
        self.loads += 1
        if self.max_loads_per_launch is not None and self.loads > self.max_loads_per_launch:
            raise OutOfBoundsAccess(f"a launch issued more than {self.max_loads_per_launch} loads")
        self._check("load", ptrs, mask, np.dtype(dtype).itemsize)
        return self._real.load(ptrs, mask, other, dtype)

    def store(self, ptrs, value, mask):
        self._check("store", ptrs, mask, value.dtype.itemsize)
        return self._real.store(ptrs, value, mask)


def install(monkeypatch) -> _Checked:
    """Check every interpreted load and store against the launch's tensors for one test;
    returns the checker (set its ``max_loads_per_launch`` to bound a launch's work)."""
    from triton.runtime import interpreter

    ranges: list[tuple[int, int]] = []
    checked = _Checked(interpreter._interpreter, ranges)
    real_init = interpreter.GridExecutor._init_args_hst

    def recording_init(self, args_dev, kwargs):
        args_hst, kwargs_hst = real_init(self, args_dev, kwargs)
        ranges.clear()
        checked.loads = 0
        pending = [*args_hst, *kwargs_hst.values()]
        while pending:
            arg = pending.pop()
            if isinstance(arg, tuple):
                pending.extend(arg)
            elif hasattr(arg, "base") and hasattr(arg, "block_shape"):  # a TMA tensor descriptor
                pending.append(arg.base)
            elif hasattr(arg, "untyped_storage"):
                storage = arg.untyped_storage()
                ranges.append((storage.data_ptr(), storage.data_ptr() + storage.nbytes()))
        return args_hst, kwargs_hst

    monkeypatch.setattr(interpreter.GridExecutor, "_init_args_hst", recording_init)
    monkeypatch.setattr(interpreter, "_interpreter", checked)
    return checked
