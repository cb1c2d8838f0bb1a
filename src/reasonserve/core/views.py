"""Frozen views a scheduling policy decides on (host-agnostic: engine, simulator, adapters).

A host builds one :class:`SchedulerView` per step. Each :class:`RequestView` carries
what the policy families need: arrival and last-enqueue times, phase, token counts, KV
blocks held and the blocks it needs to run its pending tokens this step, the program
it belongs to (reasoning programs: self-consistency samples, beams), prefix hashes
(one per full prompt block, chained), the tokens computed since it was last admitted
(its quantum used), priority and whether it is deterministic; a host that
counts answer tokens and paces them (PASCAL's token pacer) also says how many and
when the user will have read them. Views are immutable;
policies must not keep references that outlive ``decide``.

A host that keeps its waiting queue as columns (:class:`~reasonserve.core.column_store.ColumnStore`)
also passes ``waiting_columns``: a :class:`~reasonserve.core.columns.QueueColumns` whose
row i describes ``waiting[i]`` (same values as the view's fields). Policies read the
queue through :func:`~reasonserve.core.columns.columns_of`, which falls back to reading
the objects, so a view without columns gets the same decisions. A host that replaces
``waiting`` (``dataclasses.replace``) must replace or drop the columns with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.core.phase import Phase

if TYPE_CHECKING:
    from reasonserve.core.columns import QueueColumns

__all__ = ["InstanceView", "ProgramView", "RequestView", "SchedulerView"]


class RequestView(NamedTuple):
    """One request, as a policy sees it (a named tuple: immutable and cheap to build, since
    a host builds one per request per step)."""

    request_id: str
    arrival_s: float
    phase: Phase
    num_prompt_tokens: int
    num_computed_tokens: int
    num_output_tokens: int
    priority: int = 0  # larger is more urgent (OpenAI-style extension)
    num_blocks: int = 0  # KV blocks held now
    blocks_needed: int = 0  # more blocks to run this request's pending tokens (admission: all of them)
    enqueued_s: float = 0.0  # when it last entered the waiting queue (arrival, or its last preemption)
    quantum_used: int = 0  # tokens computed since it was last admitted
    max_tokens: int = 0  # its output budget
    program_id: str | None = None
    prefix_hashes: tuple[int, ...] = ()
    deterministic: bool = False
    swapped: bool = False  # preempted with its KV kept in host memory
    num_answer_tokens: int | None = None  # output tokens after its end of thinking (None: not counted)
    paced_until_s: float | None = None  # when a token pacer has released its answer tokens so far

    @property
    def num_tokens(self) -> int:
        return self.num_prompt_tokens + self.num_output_tokens

    @property
    def is_deterministic(self) -> bool:
        """``deterministic`` under LLM-42's name for the per-request flag."""
        return self.deterministic


@dataclass(frozen=True, slots=True)
class ProgramView:
    """A reasoning program (e.g. the samples of one self-consistency question).

    A host that runs programs (the simulator's program runtime) also reports their
    progress, what Dynasor's scheduler reads (SPEC 2.1): ``knob`` units of compute done
    (samples, iterations finished), ``max_knob`` its cap (0: unknown), ``certainty`` its
    certainindex after ``knob`` units (None: not read yet) and ``done`` once its
    allocation denied more compute. A host that only groups requests leaves the defaults.
    """

    program_id: str
    request_ids: tuple[str, ...]
    arrival_s: float
    knob: int = 0
    max_knob: int = 0
    certainty: float | None = None
    done: bool = False


@dataclass(frozen=True, slots=True)
class InstanceView:
    """One serving instance, for router policies over several hosts."""

    instance_id: str
    num_running: int
    num_waiting: int
    free_blocks: int
    total_blocks: int


@dataclass(frozen=True, slots=True)
class SchedulerView:
    now_s: float
    waiting: tuple[RequestView, ...]
    running: tuple[RequestView, ...]
    free_blocks: int
    block_size: int
    max_num_seqs: int
    total_blocks: int = 0
    max_num_batched_tokens: int = 0
    step: int = 0
    programs: tuple[ProgramView, ...] = ()
    instance_id: str = "0"
    waiting_columns: QueueColumns | None = None  # the host's columns of ``waiting``, row by row

    def __post_init__(self) -> None:
        cols = self.waiting_columns
        if cols is None:
            return
        if len(cols) != len(self.waiting):
            raise InvalidArgumentError(
                f"waiting_columns has {len(cols)} rows for {len(self.waiting)} waiting requests (row i "
                "must describe waiting[i])"
            )
        ends = getattr(cols, "ends", None)  # a store's snapshot names its first and last rows
        if ends is not None and ends != (self.waiting[0].request_id, self.waiting[-1].request_id):
            raise InvalidArgumentError(
                f"waiting_columns rows run from {ends[0]!r} to {ends[1]!r}, the waiting requests from "
                f"{self.waiting[0].request_id!r} to {self.waiting[-1].request_id!r} (row i must describe "
                "waiting[i])"
            )
