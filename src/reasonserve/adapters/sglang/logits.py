"""Seeded sampling as an SGLang ``CustomLogitProcessor``.

SGLang calls the processor with the logits rows of the requests that named it and
their ``custom_params`` (plus ``"__req__"``, a weak proxy of the request). Rows whose
``custom_params`` carry ``reasonserve_seed`` become a one-hot at the token
``reasonserve.ops.sample`` draws for the request's temperature, top-k, top-p, min-p
and the position of the token being drawn (:mod:`reasonserve.adapters.seeded`).

The position is read from SGLang's own forward-side counters, not from
``len(prompt) + len(output)``: under SGLang's default overlap loop, step t is
prepared and run before step t-1's token is appended to ``req.output_ids``, so that
sum lags by one depending on batch timing. ``req.full_untruncated_fill_ids`` is the
prompt plus the output at the request's last (re)prefill and ``req.decode_batch_idx``
counts the decode steps prepared since (``ScheduleBatch.prepare_for_decode`` adds one
before each decode forward, a retraction resets both), so their sum is the position
of the token this forward samples, overlapped or not. A request without them (another
SGLang) is logged and left to SGLang's sampler rather than drawn at a guessed position.

Speculative decoding (EAGLE and the other draft workers): SGLang's verify path does
not call custom logit processors, so seeded requests are sampled by SGLang there
(``docs/use_sglang.md``).
SGLang applies custom processors before temperature and top-k/top-p, and its own
greedy path (temperature 0 becomes top-k 1) keeps the one finite entry.

A client sends ``SeededSamplingProcessor.to_str()`` as the request's
``custom_logit_processor`` and ``{"reasonserve_seed": S}`` in
``sampling_params.custom_params``. The server must run with
``--enable-custom-logit-processor``, which makes it **unpickle (dill) and run code
sent by any client**: only enable it on a server whose clients you trust (see
``docs/use_sglang.md``). The string names this class by reference, so the server
needs reasonserve installed too.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from sglang.srt.sampling.custom_logit_processor import CustomLogitProcessor

from reasonserve.adapters.seeded import SeededParams, force_seeded, seeded_params

__all__ = ["SeededSamplingProcessor"]

_log = logging.getLogger(__name__)
_TOP_K_OFF = 1 << 30  # SGLang's "whole vocabulary"


class SeededSamplingProcessor(CustomLogitProcessor):
    """See the module docstring."""

    def __call__(self, logits: torch.Tensor, custom_param_list: list[dict[str, Any]] | None = None):
        rows: list[int] = []
        params: list[SeededParams] = []
        positions: list[int] = []
        for row, custom in enumerate(custom_param_list or ()):
            found = _seeded(custom)
            if found is not None:
                rows.append(row)
                params.append(found[0])
                positions.append(found[1])
        return force_seeded(logits, rows, params, positions)


def _seeded(custom) -> tuple[SeededParams, int] | None:
    """``(params, position)`` of one row, or None (not opted in, or malformed: logged)."""
    if not isinstance(custom, dict):
        return None
    req = custom.get("__req__")
    try:
        if req is None:
            return None
        sp = req.sampling_params
        top_k = sp.top_k if 0 < sp.top_k < _TOP_K_OFF else 0
        found = seeded_params(custom, temperature=sp.temperature, top_k=top_k, top_p=sp.top_p, min_p=sp.min_p)
        if found is None:
            return None
        return found, len(req.full_untruncated_fill_ids) + req.decode_batch_idx
    except (ValueError, TypeError, ReferenceError, AttributeError) as err:  # bad seed, gone, other SGLang
        _log.warning("reasonserve seeded sampling: %s; row left to SGLang", err)
        return None
