"""The engine side of decode-verify-rollback: fixed-shape verify passes over the paged
cache, driven by the host-agnostic state machine in :mod:`reasonserve.dvr`.

Every pass has one shape: ``dvr_group_size`` slots x ``dvr_window`` queries. A slot
replays ``[last verified token] + unverified[:-1]`` of one request (padded with dummy
queries); empty slots are all dummies. Dummy queries write their K/V to the scratch
block and their rows are discarded. The verifier's tokens are sampled from those
invariant logits at the same positions with the request's seed; the agreeing prefix
(plus the verifier's token at the first mismatch) is committed and the rest rolled back.
"""

from __future__ import annotations

from collections.abc import Callable

from reasonserve.dvr.controller import DVRCounters, plan_groups, verify_inputs
from reasonserve.engine.engine_config import EngineConfig
from reasonserve.engine.kernels import INVARIANT
from reasonserve.engine.logprobs import token_logprobs
from reasonserve.engine.model_runner import Chunk, ModelRunner
from reasonserve.engine.sequence import Sequence

__all__ = ["verify_due"]


def _due(seq: Sequence, window: int, stopped: Callable[[Sequence], bool]) -> bool:
    return (
        seq.params.deterministic
        and bool(seq.output)
        and seq.dvr.needs_verify(len(seq.output), window, stopped(seq))
    )


def verify_due(
    running: list[Sequence],
    runner: ModelRunner,
    config: EngineConfig,
    counters: DVRCounters,
    stopped: Callable[[Sequence], bool],
    now: Callable[[], float],
) -> list[tuple[Sequence, Exception | None]]:
    """Verify every deterministic request that is due; returns the requests verified (with
    the exception that failed them, if any), for the host to finish the complete ones."""
    window, group_size = config.dvr_window, config.dvr_group_size
    due = {s.request_id: s for s in running if _due(s, window, stopped)}
    done: list[tuple[Sequence, Exception | None]] = []
    for group in plan_groups(list(due), group_size):
        seqs = [due[r] if r is not None else None for r in group]
        done += _verify_group(seqs, runner, window, counters, now)
    return done


def _verify_group(
    group: list[Sequence | None],
    runner: ModelRunner,
    window: int,
    counters: DVRCounters,
    now: Callable[[], float],
) -> list[tuple[Sequence, Exception | None]]:
    chunks, starts = [], []
    for seq in group:
        if seq is None:
            chunks.append(Chunk([], 0, [], want=0, pad_to=window))
            starts.append(0)
            continue
        tokens, start = verify_inputs(seq.tokens, len(seq.prompt), seq.dvr)
        chunks.append(Chunk(tokens, start, seq.block_table, want=len(tokens), pad_to=window))
        starts.append(start)
    real = [(s, c, st) for s, c, st in zip(group, chunks, starts, strict=True) if s is not None]
    try:
        logits = runner.run(chunks, INVARIANT)
    except Exception as err:
        return [(s, err) for s, _, _ in real]
    counters.verify_passes += 1
    counters.verify_tokens += window * len(group)
    out, row = [], 0
    for seq, chunk, start in real:
        n = len(chunk.tokens)
        out.append((seq, _commit(seq, logits[row : row + n], start, runner, window, counters, now)))
        row += n
    return out


def _commit(
    seq: Sequence,
    logits,
    start: int,
    runner: ModelRunner,
    window: int,
    counters: DVRCounters,
    now: Callable[[], float],
) -> Exception | None:
    state = seq.dvr
    first, decoded = len(seq.prompt) + state.verified, seq.output[state.verified :]
    checked = runner.sample(
        logits,
        [seq.params] * len(decoded),
        [seq.seed] * len(decoded),
        list(range(first, first + len(decoded))),
    )
    failed = next((c for c in checked if isinstance(c, Exception)), None)
    if failed is not None:
        return failed
    for j in range(len(checked)):  # the thinking budget forces the same tokens as decoding did
        forced = seq.forced_token(state.verified + j)
        checked[j] = checked[j] if forced is None else forced
    before = state.verified
    result = state.commit(decoded, checked, window)  # type: ignore[arg-type]
    # KV now trusted: the replayed inputs up to the one that predicted the first mismatch.
    seq.num_computed = start + min(result.keep + 1, len(decoded))
    k = seq.params.logprobs
    if k is not None:  # committed tokens report the verify pass's (batch-invariant) logprobs
        for j in range(result.keep):
            seq.logprobs[before + j] = token_logprobs(logits[j], decoded[j], k)
    if result.replacement is not None:
        counters.rollbacks += 1
        counters.tokens_rolled_back += len(decoded) - result.keep
        seq.truncate(before + result.keep)
        replacement = None if k is None else token_logprobs(logits[result.keep], result.replacement, k)
        seq.append(result.replacement, now(), replacement)
    return None
