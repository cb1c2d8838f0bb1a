"""Seeded sampling as a logits processor for vLLM's V1 sampler (``vllm.v1.sample``).

vLLM calls ``update_state`` with the persistent batch's changes before each step and
``apply`` with the step's logits ``[num_reqs, V]``. Rows of requests that carry
``reasonserve_seed`` become a one-hot at the token ``reasonserve.ops.sample`` draws
(see :mod:`reasonserve.adapters.seeded`); other rows are untouched. The processor is
not argmax-invariant, so V1 applies it before penalties: in V1 the drawn token does
not see repetition/frequency/presence penalties (Model Runner V2 applies them first).

Register with ``--logits-processors reasonserve.adapters.vllm.logits_v1:SeededSamplingLogitsProcessorV1``
only when running the V1 model runner; the entry-point class
(:class:`reasonserve.adapters.vllm.logits_v2.SeededSamplingPlugin`) picks the right
interface by itself.
"""

from __future__ import annotations

import logging

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality

from reasonserve.adapters.seeded import SeededParams, force_seeded
from reasonserve.adapters.vllm._params import from_vllm, validate

__all__ = ["SeededSamplingLogitsProcessorV1"]

_log = logging.getLogger(__name__)
# batch index -> (params, prompt ids, live output ids)
_State = tuple[SeededParams, list[int], list[int]]


class SeededSamplingLogitsProcessorV1(LogitsProcessor):
    """See the module docstring."""

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool) -> None:
        self._rows: dict[int, _State] = {}

    @classmethod
    def validate_params(cls, sampling_params) -> None:
        validate(sampling_params)

    def is_argmax_invariant(self) -> bool:
        return False  # it picks the token, greedy requests included

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        # The interface's documented order: removed, added, moved.
        for index in batch_update.removed:
            self._rows.pop(index, None)
        for index, params, prompt_ids, output_ids in batch_update.added:
            state = _new_state(params, prompt_ids, output_ids)
            if state is None:
                self._rows.pop(index, None)
            else:
                self._rows[index] = state
        for a, b, direction in batch_update.moved:
            first, second = self._rows.pop(a, None), self._rows.pop(b, None)
            if first is not None:
                self._rows[b] = first
            if second is not None and direction == MoveDirectionality.SWAP:
                self._rows[a] = second

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self._rows:
            return logits
        rows = sorted(i for i in self._rows if i < logits.shape[0])
        states = [self._rows[i] for i in rows]
        positions = [len(prompt) + len(output) for _, prompt, output in states]
        return force_seeded(logits, rows, [params for params, _, _ in states], positions)


def _new_state(params, prompt_ids: list[int] | None, output_ids: list[int]) -> _State | None:
    try:
        seeded = from_vllm(params)
    except (ValueError, TypeError) as err:  # validate_params turned it away at admission
        _log.warning("reasonserve seeded sampling: %s; request left to vLLM", err)
        return None
    if seeded is None:
        return None
    if prompt_ids is None:  # prompt embeddings: no token count to place the draw
        _log.warning("reasonserve seeded sampling needs prompt token ids; request left to vLLM")
        return None
    return seeded, prompt_ids, output_ids
