"""Experimental phase-aware scheduling for vLLM (``--scheduler-cls``), after PASCAL.

vLLM's FCFS scheduler serves ``self.running`` in list order, admits from the front of
``self.waiting``, and when KV blocks run out preempts the last running request. Before
each ``schedule()`` these subclasses reorder both by the PASCAL policy's ranking
(:meth:`reasonserve.policies.pascal.PascalPolicy.rank_key`: reasoning before answering,
round-robin with a token quantum inside each queue, demotion of very long reasoning),
then let vLLM schedule as usual. So reasoning requests get the token budget and KV
first, and answering requests are the ones preempted (PASCAL's controlled preemption;
vLLM recomputes instead of swapping). The phase comes from the generated ids: a request
answers once it has produced an end-of-thinking token (:mod:`..phase_book`).

Configure with ``--additional-config '{"reasonserve": {"think_end_token_id": ID}}'``
(optionally ``quantum`` and ``demote_threshold_tokens``) and
``--scheduling-policy fcfs`` (the default; the priority policy keeps a heap that
cannot be reordered). Experimental: vLLM says its scheduler interface is not public;
this was checked against vLLM 0.33 (``tests/adapters``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.request_queue import SchedulingPolicy
from vllm.v1.core.sched.scheduler import Scheduler

from reasonserve.adapters.phase_book import CONFIG_KEY, PhaseAwareConfig, PhaseBook
from reasonserve.core.errors import InvalidArgumentError

__all__ = ["PhaseAwareScheduler", "PhaseAwareSyncScheduler"]

_log = logging.getLogger(__name__)


class _PhaseAware:
    """The reordering shared by the async and the synchronous variants."""

    # vLLM's Scheduler provides these; every concrete class below derives from it.
    policy: SchedulingPolicy
    vllm_config: Any
    running: list
    waiting: Any
    requests: dict

    def _init_phase_aware(self) -> None:
        if self.policy != SchedulingPolicy.FCFS:
            raise InvalidArgumentError(
                "the reasonserve phase-aware scheduler needs --scheduling-policy fcfs "
                f"(got {self.policy.value}); it orders the queues itself"
            )
        extra = self.vllm_config.additional_config
        settings = extra.get(CONFIG_KEY) if isinstance(extra, dict) else None
        if settings is None:
            raise InvalidArgumentError(
                "the reasonserve phase-aware scheduler needs --additional-config "
                '\'{"reasonserve": {"think_end_token_id": ID}}\' (the id of </think>)'
            )
        config = PhaseAwareConfig.from_mapping(settings)
        self.phase_book = PhaseBook(config)

    def schedule(self, *args, **kwargs):
        self.reorder_queues(time.time())
        return super().schedule(*args, **kwargs)

    def reorder_queues(self, now_s: float) -> None:
        """Sort ``running`` and both waiting queues (``kv_holding_waiting``: preempted or
        remote-KV requests that still hold blocks, drained first by vLLM; ``waiting``) by
        :meth:`PhaseBook.rank` (stable; ties by id)."""
        book = self.phase_book
        rank, cached = book.rank, book.waiting_key

        def running_key(r):
            return rank(r.request_id, r.arrival_time, r.num_prompt_tokens, r.num_computed_tokens, _outputs(r),
                        True, now_s)  # fmt: skip

        def waiting_key(r):
            key = cached(r.request_id, r.num_computed_tokens)
            if key is not None:
                return key
            return rank(r.request_id, r.arrival_time, r.num_prompt_tokens, r.num_computed_tokens, _outputs(r),
                        False, now_s)  # fmt: skip

        self.running.sort(key=running_key)
        for queue in (getattr(self, "kv_holding_waiting", None), self.waiting):
            if queue is not None and len(queue) > 0:
                ordered = sorted(queue, key=waiting_key)
                if any(a is not b for a, b in zip(ordered, queue, strict=True)):
                    queue.clear()
                    queue.extend(ordered)
        if len(self.phase_book) > len(self.requests):
            self.phase_book.retain(self.requests)


def _outputs(request) -> list[int]:
    """The request's generated ids: vLLM's own list (its read-only wrapper costs a Python
    call per ``len`` and slice), or the public wrapper where a vLLM has no such list."""
    ids = getattr(request, "_output_token_ids", None)
    return request.output_token_ids if ids is None else ids


class PhaseAwareScheduler(_PhaseAware, AsyncScheduler):
    """For ``--scheduler-cls`` with async scheduling (vLLM's default on GPUs)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._init_phase_aware()


class PhaseAwareSyncScheduler(_PhaseAware, Scheduler):
    """For ``--scheduler-cls`` with ``--no-async-scheduling``."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._init_phase_aware()
