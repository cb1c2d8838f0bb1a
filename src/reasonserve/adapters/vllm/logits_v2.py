"""Seeded sampling as a logits processor for vLLM's Model Runner V2 (the 0.33 default).

``add_request`` writes, per persistent slot, the params of a request that carries
``reasonserve_seed`` into small device tables (and marks the slot inactive for any
other request, so a recycled slot never keeps its previous occupant's seed). ``apply``
maps each logits row to its slot (``ctx.expanded_idx_mapping``: under speculative
decoding a request owns one row per draft token) and turns the rows of seeded requests
into a one-hot at the token ``reasonserve.ops.sample`` draws for the row's own position
``ctx.pos + 1`` (the position of the token being sampled). Everything stays on the
device: one fused sampler pass over the seeded rows, no host sync. V2 calls ``apply`` after bias, penalties,
bad words and grammar, and before temperature, min-p, top-k and top-p, so the draw
sees the penalised logits and the later stages cannot move it.

:class:`SeededSamplingPlugin` is the class registered under the
``vllm.logits_processors`` entry-point group. vLLM 0.33's V2 loader accepts only V2
subclasses there, and its V1 loader constructs every entry-point class with V1's
arguments ``(vllm_config, device, is_pin_memory)``: the plugin is a V2 subclass that,
called that way, returns the V1 processor instead. So installing reasonserve never
breaks either model runner.
"""

from __future__ import annotations

import logging

import torch
from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext, LogitsProcessor

from reasonserve.adapters.seeded import SeededParams, SlotTable
from reasonserve.adapters.vllm._params import from_vllm, validate

__all__ = ["SeededSamplingLogitsProcessor", "SeededSamplingPlugin"]

_log = logging.getLogger(__name__)


class SeededSamplingLogitsProcessor(LogitsProcessor):
    """See the module docstring."""

    def __init__(self, vllm_config, req_states) -> None:
        super().__init__(vllm_config, req_states)
        self._slots: dict[int, SeededParams] = {}
        self._table = SlotTable(req_states.max_num_reqs, req_states.device)

    @classmethod
    def validate_params(cls, sampling_params) -> None:
        validate(sampling_params)

    def add_request(self, req_idx: int, sampling_params) -> bool:
        try:
            seeded = from_vllm(sampling_params)
        except (ValueError, TypeError) as err:  # validate_params turned it away at admission
            _log.warning("reasonserve seeded sampling: %s; request left to vLLM", err)
            seeded = None
        self._table.set(req_idx, seeded)
        if seeded is None:
            self._slots.pop(req_idx, None)  # the slot's previous occupant
            return False
        self._slots[req_idx] = seeded
        return True

    def apply(self, logits: torch.Tensor, ctx: LogitsContext) -> torch.Tensor:
        if not self._slots:
            return logits
        self._table.sample(logits, ctx.expanded_idx_mapping, ctx.pos + 1, self._slots.values())
        return logits


class SeededSamplingPlugin(SeededSamplingLogitsProcessor):
    """The entry-point class: a V2 processor; constructed with V1's arguments, the V1 one."""

    def __new__(cls, vllm_config=None, *args, **kwargs):
        if _v1_arguments(args, kwargs):
            from reasonserve.adapters.vllm.logits_v1 import SeededSamplingLogitsProcessorV1

            return SeededSamplingLogitsProcessorV1(vllm_config, *args, **kwargs)
        return super().__new__(cls)


def _v1_arguments(args: tuple, kwargs: dict) -> bool:
    """V1 builds ``ctor(vllm_config, device, is_pin_memory)``; V2 ``ctor(vllm_config, req_states)``."""
    if "device" in kwargs or "is_pin_memory" in kwargs:
        return True
    return len(args) == 2 and isinstance(args[0], (torch.device, str))
