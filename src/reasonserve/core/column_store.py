"""A host's waiting queue kept as columns (:class:`ColumnStore`), updated as requests
enter and leave, whose snapshots are the :class:`~reasonserve.core.columns.QueueColumns`
a host passes in ``SchedulerView.waiting_columns`` (see :mod:`reasonserve.core.columns`)."""

from __future__ import annotations

import numpy as np

from reasonserve.core.columns import (
    NUMERIC,
    PREFIX_WIDTH,
    QueueColumns,
    _check_width,
    _readonly,
    column_getter,
    prefix_head,
    program_key,
)
from reasonserve.core.errors import InvalidArgumentError, InvalidTypeError, UnknownRequestError
from reasonserve.core.views import RequestView

__all__ = ["ColumnStore"]


class ColumnStore:
    """A host's waiting queue kept as columns, in queue order, updated as requests enter
    (:meth:`append`) and leave (:meth:`remove`, by id): O(1) amortised per change (a removed
    row is marked dead; the store is compacted once dead rows outnumber live ones).
    :meth:`snapshot` returns the queue's views and a :class:`QueueColumns` aligned with them
    (one gather per column). A host puts both in its :class:`SchedulerView`. The views are
    the ones appended: a host must remove and re-append a request whose view changes."""

    def __init__(self, prefix_width: int = PREFIX_WIDTH, capacity: int = 64) -> None:
        _check_width(prefix_width)
        self.prefix_width, self._n = prefix_width, 0
        self._slot: dict[str, int] = {}  # request id -> its row
        self._rows = _Rows(max(1, capacity), prefix_width)
        self._code: dict[str, int] = {}  # program key -> code (codes of emptied programs are reused)
        self._keys: list[str | None] = []
        self._count = np.zeros(16, np.intp)  # live rows per code
        self._free: list[int] = []

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._slot

    def append(self, request: RequestView) -> None:
        """Add ``request`` at the end of the queue (:class:`InvalidArgumentError` if its id is
        already queued, :class:`InvalidTypeError` if it is not a :class:`RequestView`)."""
        if not isinstance(request, RequestView):
            raise InvalidTypeError(f"ColumnStore holds RequestView rows, got {type(request).__name__}")
        if request.request_id in self._slot:
            raise InvalidArgumentError(f"request {request.request_id!r} is already in the column store")
        if self._n == len(self._rows.alive):
            self._rows = self._rows.grown(2 * self._n)
        self._rows.write(self._n, request, self._program_code(program_key(request)))
        self._slot[request.request_id] = self._n
        self._n += 1

    def remove(self, request_id: str) -> None:
        """Remove a queued request (:class:`UnknownRequestError` if it is not queued)."""
        slot = self._slot.pop(request_id, None)
        if slot is None:
            raise UnknownRequestError(f"request {request_id!r} is not in the column store")
        code = self._rows.code(slot)
        self._count[code] -= 1
        if self._count[code] == 0:
            key = self._keys[code]
            assert key is not None  # a code with live rows has its key
            del self._code[key]
            self._keys[code] = None
            self._free.append(code)
        self._rows.kill(slot)
        if self._n - len(self._slot) > max(len(self._slot), 32):
            self._n = self._rows.compact(self._n)
            self._slot = {r.request_id: i for i, r in enumerate(self._rows.views[: self._n].tolist())}

    def snapshot(self) -> tuple[tuple[RequestView, ...], QueueColumns]:
        """(the queued views in queue order, their columns): copies, unaffected by later changes."""
        rows, n = self._rows, self._n
        idx = None if len(self._slot) == n else np.flatnonzero(rows.alive[:n])

        def take(arr: np.ndarray) -> np.ndarray:  # the live rows (a new array)
            return arr[:n].copy() if idx is None else np.take(arr[:n], idx, axis=0)

        floats, ints = (_readonly(take(m).T.copy()) for m in (rows.floats, rows.ints))  # a column a row
        cache: dict = {name: floats[i] for i, name in enumerate(_FLOATS)}
        cache.update({name: ints[i] for i, name in enumerate(_INTS)})
        codes, keys = cache.pop("program_codes"), list(self._keys)
        if self._free:  # some codes unused: renumber densely
            used = self._count[: len(keys)] > 0
            codes = _readonly((np.cumsum(used) - 1)[codes])
            keys = np.fromiter(keys, object, len(keys))[used].tolist()
        cache["program_codes"], cache["program_keys"] = codes, keys
        cache["prefix_heads"] = _readonly(take(rows.heads)) if not cache.pop("bad").any() else None
        live = rows.views[:n] if idx is None else rows.views[:n][rows.alive[:n]]
        views: tuple[RequestView, ...] = tuple(live.tolist())
        ends = (views[0].request_id, views[-1].request_id) if views else None
        return views, QueueColumns(len(views), self.prefix_width, cache, None, ends)

    def _program_code(self, key: str) -> int:
        code = self._code.get(key)
        if code is None:
            code = self._free.pop() if self._free else len(self._keys)
            if code == len(self._keys):
                self._keys.append(key)
                if code == len(self._count):
                    self._count = np.concatenate((self._count, np.zeros(code, np.intp)))
            else:
                self._keys[code] = key
            self._code[key] = code
        self._count[code] += 1
        return code


_FLOATS = [name for name, dtype in NUMERIC.items() if dtype is np.float64]
_INTS = [*(n for n, dtype in NUMERIC.items() if dtype is np.int64), "program_codes", "prefix_lens", "bad"]
_INT_GETTERS = [column_getter(name) for name in _INTS[:-3]]
_FLOAT_GETTERS = [column_getter(name) for name in _FLOATS]


class _Rows:
    """:class:`ColumnStore`'s row storage: one row-major matrix per dtype (a snapshot takes the
    live rows of each in one call), capacity ``len(alive)``; rows past the used ones unset."""

    def __init__(self, capacity: int, width: int) -> None:
        self.floats = np.zeros((capacity, len(_FLOATS)), np.float64)
        self.ints = np.zeros((capacity, len(_INTS)), np.int64)  # bad: a prefix head not int64
        self.heads = np.zeros((capacity, width), np.int64)
        self.alive = np.zeros(capacity, bool)
        self.views = np.empty(capacity, object)

    def _arrays(self) -> list[np.ndarray]:
        return [self.floats, self.ints, self.heads, self.alive, self.views]

    def grown(self, capacity: int) -> _Rows:
        new = _Rows(capacity, self.heads.shape[1])
        for old, arr in zip(self._arrays(), new._arrays(), strict=True):
            arr[: len(old)] = old
        return new

    def code(self, slot: int) -> int:
        return int(self.ints[slot, _INTS.index("program_codes")])

    def write(self, slot: int, r: RequestView, code: int) -> None:
        head = prefix_head(r.prefix_hashes, self.heads.shape[1])
        ints = [*(get(r) for get in _INT_GETTERS), code, len(r.prefix_hashes), head is None]
        try:
            self.ints[slot] = ints
            self.floats[slot] = [get(r) for get in _FLOAT_GETTERS]
        except (KeyError, OverflowError, TypeError, ValueError) as e:
            raise InvalidArgumentError(f"request {r.request_id!r}: a field is not an int64: {e}") from None
        self.heads[slot] = 0
        if head is not None:
            self.heads[slot, : len(head)] = head
        self.alive[slot], self.views[slot] = True, r

    def kill(self, slot: int) -> None:
        self.alive[slot], self.views[slot] = False, None

    def compact(self, n: int) -> int:
        """Move the live rows of the first ``n`` to the front, in order; returns their count."""
        idx = np.flatnonzero(self.alive[:n])
        for arr in self._arrays():
            arr[: len(idx)] = arr[idx]
        self.alive[len(idx) : n], self.views[len(idx) : n] = False, None
        return len(idx)
