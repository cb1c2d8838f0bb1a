"""Columnar queue state: numpy arrays aligned with a tuple of request views (row i: request i).

A policy deciding on a long waiting queue spends most of its time reading one field off
each :class:`~reasonserve.core.views.RequestView` (a C-level pass of ~30-40 ns a request
per field). A host that keeps its waiting queue's fields as columns, updated as requests
enter and leave (:class:`~reasonserve.core.column_store.ColumnStore`), hands them to the policy in
``SchedulerView.waiting_columns`` and the policy reads arrays instead of objects.
:func:`columns_of` gives a policy one code path: the host's columns, or the same columns
read from the objects (lazily, a field when it is first asked for).

Columns (:data:`NUMERIC`; ints as int64, times as float64, a phase as its index in
:class:`~reasonserve.core.phase.Phase`, :data:`PHASE_CODES`), program grouping (a request
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
from typing import Any

import numpy as np

from reasonserve.core.errors import InvalidArgumentError, InvalidTypeError
from reasonserve.core.phase import Phase
from reasonserve.core.views import RequestView

__all__ = [
    "NUMERIC", "PHASE_CODES", "PREFIX_WIDTH", "QueueColumns", "column_getter", "columns_of", "field_getter",
    "prefix_head", "program_key",
]  # fmt: skip

NUMERIC: Mapping[str, type] = {
    "arrival_s": np.float64, "enqueued_s": np.float64, "num_prompt_tokens": np.int64,
    "num_computed_tokens": np.int64, "num_output_tokens": np.int64, "priority": np.int64,
    "num_blocks": np.int64, "blocks_needed": np.int64, "quantum_used": np.int64, "phase": np.int64,
}  # fmt: skip
PHASE_CODES: Mapping[Phase, int] = {phase: code for code, phase in enumerate(Phase)}  # the phase column
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
    head, firsts, starts = _runs(np.fromiter(map(field_getter("program_id"), requests), object, n))
    if None in head:  # requests without a program: each is its own
        head, firsts, starts = _runs(np.fromiter(map(program_key, requests), object, n))
    dense = np.empty(n, np.intp)
    dense[np.fromiter(head.values(), np.intp, len(head))] = np.arange(len(head))
    return np.repeat(dense[firsts], np.diff(starts, append=n)), list(head)


def field_getter(name: str) -> itemgetter:
    """A C-level getter of one :class:`RequestView` field (by position: faster than by name)."""
    return itemgetter(RequestView._fields.index(name))


def column_getter(name: str) -> Any:
    """What column ``name`` of :data:`NUMERIC` holds for one request: its field (the phase's code)."""
    get = field_getter(name)
    if name == "phase":
        return lambda r: PHASE_CODES[get(r)]
    return get


def _prefix_columns(requests: Sequence, width: int) -> tuple[np.ndarray, np.ndarray | None]:
    """(prefix_lens, prefix_heads) read off ``requests`` (heads None: some head not int64)."""
    n = len(requests)
    hashes = list(map(field_getter("prefix_hashes"), requests))
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
        cache: dict[str, Any] = {"program_keys": list(program_keys)}  # a column or the keys, by name
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
            shape: tuple[int, ...] = getattr(prefix_heads, "shape", ())
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
            assert self._requests is not None  # a host's columns (no objects) are all cached
            try:
                arr: np.ndarray = np.fromiter(map(column_getter(name), self._requests), NUMERIC[name], self.n)
            except OverflowError as e:
                raise InvalidArgumentError(f"{name} of some request does not fit in int64: {e}") from None
            except KeyError as e:
                raise InvalidArgumentError(f"a request's phase is not a Phase: {e}") from None
            self._put(name, arr)
        return self._cache[name]

    @property
    def program_codes(self) -> np.ndarray:
        if "program_codes" not in self._cache:
            assert self._requests is not None  # a host's columns (no objects) are all cached
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
            assert self._requests is not None  # a host's columns (no objects) are all cached
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
