"""Measure the embedded engine's step times as :class:`~reasonserve.cost.profile.ProfileRow`
rows (the input of the simulator's profile-table cost mode).

Each ``Engine.step()`` is timed with ``clock``; its features come from the engine's
sequences before and after the step: the tokens each sequence computed (a prompt chunk
counts as prefill, one token past the prompt as a decode) and the KV tokens its
attention read (its ``num_computed`` before the step).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from reasonserve.cost.profile import ProfileRow

__all__ = ["measure_engine_steps"]


def _step_row(before: list[tuple[Any, int, int]], seconds: float) -> ProfileRow | None:
    prefill = decode = kv = 0
    for seq, computed, prompt_len in before:
        n = seq.num_computed - computed
        if n <= 0:
            continue
        if n == 1 and computed >= prompt_len:
            decode += 1
        else:
            prefill += n
        kv += computed
    if prefill + decode == 0:
        return None
    return ProfileRow(prefill, decode, kv, seconds)


def measure_engine_steps(
    engine,
    prompts: Sequence[Sequence[int]],
    params: Sequence,
    *,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[list[ProfileRow], list, float]:
    """Queue ``prompts`` (with ``params``) on ``engine`` and step it until all finish.
    Returns (one row per step that computed tokens, the finished outputs in request
    order, seconds from the first add to the last finish on ``clock``)."""
    start = clock()
    ids = [engine.add_request(list(p), s) for p, s in zip(prompts, params, strict=True)]
    rows: list[ProfileRow] = []
    outs: dict[str, object] = {}
    sched = engine.scheduler
    while engine.has_unfinished():
        before = [(s, s.num_computed, len(s.prompt)) for s in sched.running + sched.waiting]
        t0 = clock()
        finished = engine.step()
        row = _step_row(before, clock() - t0)
        if row is not None:
            rows.append(row)
        outs.update((o.request_id, o) for o in finished)
    return rows, [outs[i] for i in ids], clock() - start
