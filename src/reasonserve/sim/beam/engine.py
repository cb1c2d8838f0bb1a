"""The two models of one beam-search instance: a generator that decodes beams' steps with
continuous batching, and a verifier (a discriminative PRM) that prefills them, each on its
share of the KV memory, on one GPU. Step times come from the roofline cost model.

The generator runs its batch until the next event (a step ends, memory runs out, a request
arrives), charging ``k`` decode steps at their mid-point context. Admission needs the
beam's path resident: cached nodes are reused, missing ones (and tokens of a step whose
KV was dropped) are recomputed by prefill. When the batch's growth does not fit, the
newest sequence is preempted (speculative ones first), keeping its tokens but not its KV.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.cost.roofline import RooflineCostModel
from reasonserve.sim.beam.cache import NodeCache
from reasonserve.sim.beam.tree import Beam

__all__ = ["GenTask", "Generator", "Verifier", "VerifyTask"]


@dataclass(slots=True)
class GenTask:
    """Generate ``beam``'s step; ``parent`` is set for a speculative branch (``beam`` is
    then the child whose step it pre-generates)."""

    beam: Beam
    request_id: str
    context: int  # prompt + path tokens before the step
    progress: int = 0
    kv: int = 0  # tokens of progress in this task's private KV
    parent: str | None = None
    branch: int = 0
    head: tuple[str, ...] = ()  # a cached speculative node holding the first ``shared`` tokens
    shared: int = 0

    @property
    def remaining(self) -> int:
        return self.beam.step_tokens - self.progress

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.beam.path + self.head

    @property
    def unbacked(self) -> int:
        """Tokens of progress with no KV (dropped by a preemption): recomputed at admission."""
        return self.progress - self.shared - self.kv


class Generator:
    def __init__(self, cost: RooflineCostModel, capacity_tokens: int, max_seqs: int, sizes: dict[str, int]):
        self.cost, self.cache, self.max_seqs, self.sizes = cost, NodeCache(capacity_tokens), max_seqs, sizes
        self.queue: deque[GenTask] = deque()
        self.running: list[GenTask] = []
        self.decode_tokens = self.spec_tokens = self.recompute_tokens = 0

    def try_admit(self, task: GenTask, prefill: list[tuple[int, int]]) -> bool:
        """Seat ``task`` if a seat and its KV fit; its prefill chunk goes to ``prefill``."""
        if len(self.running) >= self.max_seqs:
            return False
        path = task.nodes
        cached, missing = self.cache.missing(path, self.sizes)
        redo = missing + task.unbacked
        if not self.cache.make_room(redo + 1):
            if not self.running and not self.cache.pins:
                raise InvalidArgumentError(
                    f"generator KV ({self.cache.capacity} tokens) cannot hold beam {task.beam.beam_id} "
                    f"({cached + redo + 1} tokens)"
                )
            return False
        self.cache.pin(path, self.sizes)
        self.cache.private += task.unbacked
        task.kv = task.progress - task.shared
        if redo:
            prefill.append((redo, cached))
            self.recompute_tokens += redo
        self.running.append(task)
        return True

    def release(self, task: GenTask) -> None:
        """Take ``task`` out of the batch, dropping its private KV (tokens are kept)."""
        self.running.remove(task)
        self.cache.private -= task.kv
        task.kv = 0
        self.cache.unpin(task.nodes)

    def finish(self, task: GenTask) -> None:
        """``task``'s step is done: its KV becomes the cached node named by the beam id."""
        self.running.remove(task)
        self.cache.private -= task.kv
        task.kv = 0
        self.cache.unpin(task.nodes)
        self.cache.add(task.beam.beam_id, task.beam.step_tokens)

    def decode_time(self, k: int) -> float:
        """Seconds for ``k`` decode steps of the running batch (mid-point contexts)."""
        return k * self.cost.step_s([(1, t.context + t.progress + k // 2) for t in self.running])

    def advance(self, k: int) -> list[GenTask]:
        """``k`` tokens for every running task; the tasks whose step is now complete."""
        for t in self.running:
            t.progress += k
            t.kv += k
            if t.parent is None:
                self.decode_tokens += k
            else:
                self.spec_tokens += k
        self.cache.private += k * len(self.running)
        return [t for t in self.running if t.remaining == 0]


@dataclass(slots=True)
class VerifyTask:
    """Score ``beam``'s step; ``nodes``: its path, its step, and a look-ahead step if any."""

    beam: Beam
    request_id: str
    nodes: tuple[str, ...]


class Verifier:
    def __init__(
        self, cost: RooflineCostModel, capacity_tokens: int, max_seqs: int, sizes: dict[str, int],
        prefix_caching: bool = True,
    ) -> None:  # fmt: skip
        self.cost, self.cache, self.max_seqs, self.sizes = cost, NodeCache(capacity_tokens), max_seqs, sizes
        self.prefix_caching = prefix_caching  # off: every request prefills its whole sequence
        self.queue: deque[VerifyTask] = deque()
        self.prefill_tokens = 0

    def step(self) -> tuple[float, list[VerifyTask]]:
        """One prefill batch from the head of the queue: (seconds, tasks verified)."""
        chunks: list[tuple[int, int]] = []
        batch: list[VerifyTask] = []
        while self.queue and len(batch) < self.max_seqs:
            task = self.queue[0]
            cached, missing = self.cache.missing(task.nodes, self.sizes)
            if not self.cache.make_room(missing):
                if not batch:
                    raise InvalidArgumentError(
                        f"verifier KV ({self.cache.capacity} tokens) cannot hold beam {task.beam.beam_id} "
                        f"({cached + missing} tokens)"
                    )
                break
            self.cache.pin(task.nodes, self.sizes)
            chunks.append((missing, cached))
            batch.append(self.queue.popleft())
        for task in batch:
            self.cache.unpin(task.nodes)
        if not self.prefix_caching:
            self.cache.make_room(self.cache.capacity)  # forget every cached prefix
        self.prefill_tokens += sum(m for m, _ in chunks)
        return self.cost.step_s([c for c in chunks if c[0] > 0]) or self.cost.step_overhead_s, batch
