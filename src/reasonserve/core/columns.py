"""Columnar queue state: numpy arrays aligned with a tuple of request views (row i: request i).

A policy deciding on a long waiting queue spends most of its time reading one field off
each :class:`~reasonserve.core.views.RequestView` (a C-level pass of ~30-40 ns a request
per field). A host that keeps its waiting queue's fields as columns, updated as requests
enter and leave (:class:`ColumnStore`), hands them to the policy in
``SchedulerView.waiting_columns`` and the policy reads arrays instead of objects.
:func:`columns_of` gives a policy one code path: the host's columns, or the same columns
read from the objects (lazily, a field when it is first asked for).

Columns (:data:`NUMERIC`; ints as int64, times as float64), program grouping (a request
without a program is its own program, keyed ``"\\x00" + request_id``: ``program_keys[c]``
is program c's key, ``program_codes[i]`` request i's program, every key used by some row)
and the first ``prefix_width`` prefix hashes of each request (``prefix_heads``, int64,
``(n, prefix_width)``, entries past ``prefix_lens[i]`` are 0; None when a row's first
hashes are not all ints in int64: then policies read the hashes off the objects).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import chain, islice
from operator import itemgetter

import numpy as np

from reasonserve.core.errors import InvalidArgumentError, InvalidTypeError, UnknownRequestError
from reasonserve.core.views import RequestView

__all__ = [
    "NUMERIC", "PREFIX_WIDTH", "ColumnStore", "QueueColumns", "columns_of", "prefix_head", "program_key",
]  # fmt: skip

NUMERIC: Mapping[str, type] = {
    "arrival_s": np.float64, "enqueued_s": np.float64, "num_prompt_tokens": np.int64,
    "num_computed_tokens": np.int64, "num_output_tokens": np.int64, "priority": np.int64,
    "num_blocks": np.int64, "blocks_needed": np.int64, "quantum_used": np.int64,
}  # fmt: skip
PREFIX_WIDTH = 8  # prefix hashes kept per request as columns (longer matches read the objects)
_INT64 = np.iinfo(np.int64)


def program_key(request) -> str:
    """A request's program key: its ``program_id``, or its own (``"\\x00" + request_id``)."""
    return request.program_id if request.program_id is not None else "\x00" + request.request_id


def prefix_head(hashes: Sequence, width: int) -> tuple[int, ...] | None:
    """The first ``width`` of ``hashes`` if they are ints (bool included) in int64, else None."""
    head = tuple(islice(hashes, width))
    if all(isinstance(h, int) and _INT64.min <= h <= _INT64.max for h in head):
        return head
    return None


def _runs(keys: np.ndarray) -> tuple[dict, np.ndarray, np.ndarray]:
    """(each distinct key -> the index of its first occurrence, that index for each run of
    equal neighbours, each run's start)."""
    starts = np.flatnonzero(np.concatenate(([True], np.not_equal(keys[1:], keys[:-1]))))
    head: dict = {}
    firsts = np.fromiter(map(head.setdefault, keys[starts].tolist(), starts.tolist()), np.intp, len(starts))
    return head, firsts, starts


def _program_columns(requests: Sequence) -> tuple[np.ndarray, list[str]]:
    """(codes, keys) of ``requests``, keys in order of first appearance. A program's requests
    usually come in runs, so neighbours are compared in numpy and the dict is filled once a run."""
    n = len(requests)
    if n == 0:
        return np.zeros(0, np.intp), []
    head, firsts, starts = _runs(np.fromiter(map(_getter("program_id"), requests), object, n))
    if None in head:  # requests without a program: each is its own
        head, firsts, starts = _runs(np.fromiter(map(program_key, requests), object, n))
    dense = np.empty(n, np.intp)
    dense[np.fromiter(head.values(), np.intp, len(head))] = np.arange(len(head))
    return np.repeat(dense[firsts], np.diff(starts, append=n)), list(head)


def _getter(name: str) -> itemgetter:
    """A C-level getter of one :class:`RequestView` field (by position: faster than by name)."""
    return itemgetter(RequestView._fields.index(name))


def _prefix_columns(requests: Sequence, width: int) -> tuple[np.ndarray, np.ndarray | None]:
    """(prefix_lens, prefix_heads) read off ``requests`` (heads None: some head not int64)."""
    n = len(requests)
    hashes = list(map(_getter("prefix_hashes"), requests))
    lens = np.fromiter(map(len, hashes), np.intp, n)
    flat = np.array(list(chain.from_iterable(islice(h, width) for h in hashes)))
    if flat.size and flat.dtype.kind not in "ib":  # floats, strs, ints beyond int64 (object)
        return lens, None
    heads = np.zeros((n, width), np.int64)
    heads[np.arange(width) < np.minimum(lens, width)[:, None]] = flat
    return lens, heads


class QueueColumns:
    """Columns of a queue, row i describing ``requests[i]``. Logically immutable: the arrays
    are read-only; a column read from the objects is cached on first use.

    Hosts: :meth:`from_arrays` (or :meth:`ColumnStore.snapshot`). Policies: :func:`columns_of`.
    """

    __slots__ = ("_cache", "_requests", "ends", "n", "prefix_width")

    def __init__(
        self, n: int, prefix_width: int, cache: dict, requests: Sequence | None, ends: tuple | None = None
    ) -> None:
        self.n, self.prefix_width, self._cache, self._requests = n, prefix_width, cache, requests
        self.ends = ends  # (first row's request id, last row's) when known: a cheap alignment check

    @classmethod
    def from_requests(cls, requests: Sequence, prefix_width: int = PREFIX_WIDTH) -> QueueColumns:
        """The columns of ``requests``, each read off the objects when first asked for."""
        _check_width(prefix_width)
        return cls(len(requests), prefix_width, {}, requests)

    @classmethod
    def from_arrays(
        cls,
        columns: Mapping[str, np.ndarray],
        program_codes: np.ndarray,
        program_keys: Sequence[str],
        prefix_lens: np.ndarray,
        prefix_heads: np.ndarray | None,
    ) -> QueueColumns:
        """A host's columns (takes ownership: the arrays are made read-only). Raises
        :class:`InvalidArgumentError` / :class:`InvalidTypeError` on a missing column, a wrong
        length, shape or dtype, or a program code outside ``program_keys``."""
        n = len(program_codes)
        cache = {"program_keys": list(program_keys)}
        for name, dtype in [*NUMERIC.items(), ("program_codes", np.intp), ("prefix_lens", np.intp)]:
            arr = program_codes if name == "program_codes" else prefix_lens if name == "prefix_lens" else None
            cache[name] = _checked(name, columns.get(name) if arr is None else arr, dtype, (n,))
        codes, keys = cache["program_codes"], cache["program_keys"]
        if n and (codes.min() < 0 or codes.max() >= len(keys)):
            raise InvalidArgumentError(f"program_codes must index program_keys (0..{len(keys) - 1})")
        if len(set(keys)) != len(keys) or not np.bincount(codes, minlength=len(keys)).all():
            raise InvalidArgumentError("program_keys must be distinct and each used by some row")
        width = PREFIX_WIDTH
        if prefix_heads is not None:
            shape = getattr(prefix_heads, "shape", ())
            if len(shape) != 2 or shape[1] < 1:
                raise InvalidArgumentError("prefix_heads must be None or an int64 array (n, width >= 1)")
            width = prefix_heads.shape[1]
            prefix_heads = _checked("prefix_heads", prefix_heads, np.int64, (n, width))
        cache["prefix_heads"] = prefix_heads
        return cls(n, width, cache, None)

    def __len__(self) -> int:
        return self.n

    def column(self, name: str) -> np.ndarray:
        """A numeric column (:data:`NUMERIC`), read-only."""
        if name not in NUMERIC:
            raise InvalidArgumentError(f"unknown column {name!r}; columns are {sorted(NUMERIC)}")
        if name not in self._cache:
            try:
                arr = np.fromiter(map(_getter(name), self._requests), NUMERIC[name], self.n)
            except OverflowError as e:
                raise InvalidArgumentError(f"{name} of some request does not fit in int64: {e}") from None
            self._put(name, arr)
        return self._cache[name]

    @property
    def program_codes(self) -> np.ndarray:
        if "program_codes" not in self._cache:
            codes, self._cache["program_keys"] = _program_columns(self._requests)
            self._put("program_codes", codes)
        return self._cache["program_codes"]

    @property
    def program_keys(self) -> list[str]:
        """Program c's key (do not mutate)."""
        self.program_codes  # noqa: B018 (fills the keys)
        return self._cache["program_keys"]

    @property
    def program_index(self) -> dict[str, int]:
        """Program key -> its code (built on first use)."""
        if "program_index" not in self._cache:
            keys = self.program_keys
            self._cache["program_index"] = dict(zip(keys, range(len(keys)), strict=True))
        return self._cache["program_index"]

    @property
    def prefix_lens(self) -> np.ndarray:
        self._prefix()
        return self._cache["prefix_lens"]

    @property
    def prefix_heads(self) -> np.ndarray | None:
        self._prefix()
        return self._cache["prefix_heads"]

    def _prefix(self) -> None:
        if "prefix_lens" not in self._cache:
            lens, heads = _prefix_columns(self._requests, self.prefix_width)
            self._put("prefix_lens", lens)
            self._cache["prefix_heads"] = None if heads is None else _readonly(heads)

    def _put(self, name: str, arr: np.ndarray) -> None:
        self._cache[name] = _readonly(arr)


def columns_of(view) -> QueueColumns:
    """The columns of ``view.waiting``: the host's (``view.waiting_columns``) or read off the
    objects. Raises :class:`InvalidTypeError` if the host's are not a :class:`QueueColumns`."""
    cols = view.waiting_columns
    if cols is None:
        return QueueColumns.from_requests(view.waiting)
    if not isinstance(cols, QueueColumns):
        raise InvalidTypeError(f"waiting_columns must be a QueueColumns or None, got {type(cols).__name__}")
    return cols


def _readonly(arr: np.ndarray) -> np.ndarray:
    arr.setflags(write=False)
    return arr


def _check_width(width: object) -> None:
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise InvalidArgumentError(f"prefix_width must be an int >= 1, got {width!r}")


def _checked(name: str, arr: object, dtype: type, shape: tuple[int, ...]) -> np.ndarray:
    if not isinstance(arr, np.ndarray):
        raise InvalidTypeError(f"column {name} must be a numpy array, got {type(arr).__name__}")
    if arr.dtype != dtype:
        raise InvalidTypeError(f"column {name} must have dtype {np.dtype(dtype)}, got {arr.dtype}")
    if arr.shape != shape:
        raise InvalidArgumentError(f"column {name} must have shape {shape} (a row a request): {arr.shape}")
    return _readonly(arr)


class ColumnStore:
    """A host's waiting queue kept as columns, in queue order, updated as requests enter
    (:meth:`append`) and leave (:meth:`remove`, by id): O(1) amortised per change (a removed
    row is marked dead; the store is compacted once dead rows outnumber live ones).
    :meth:`snapshot` returns the queue's views and a :class:`QueueColumns` aligned with them
    (one gather per column). A host puts both in its :class:`SchedulerView`. The views are
    the ones appended: a host must remove and re-append a request whose view changes."""

    def __init__(self, prefix_width: int = PREFIX_WIDTH, capacity: int = 64) -> None:
        _check_width(prefix_width)
        self.prefix_width, self._n, self._slot = prefix_width, 0, {}
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
            del self._code[self._keys[code]]
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
        codes, keys = cache.pop("program_codes"), self._keys
        if self._free:  # some codes unused: renumber densely
            used = self._count[: len(keys)] > 0
            codes = _readonly((np.cumsum(used) - 1)[codes])
            keys = np.fromiter(keys, object, len(keys))[used]
        cache["program_codes"], cache["program_keys"] = codes, list(keys)
        cache["prefix_heads"] = _readonly(take(rows.heads)) if not cache.pop("bad").any() else None
        views = rows.views[:n] if idx is None else rows.views[:n][rows.alive[:n]]
        views = tuple(views.tolist())
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
        ints = [*(getattr(r, name) for name in _INTS[:-3]), code, len(r.prefix_hashes), head is None]
        try:
            self.ints[slot] = ints
            self.floats[slot] = [getattr(r, name) for name in _FLOATS]
        except (OverflowError, TypeError, ValueError) as e:
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
