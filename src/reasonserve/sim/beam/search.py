"""Beam-search serving on one GPU (FlashTTS §3-4): a generator and a PRM verifier share
one instance's KV; requests are beam searches arriving as a Poisson process.

Each iteration every active beam extends by one recorded step of variable length
(:mod:`reasonserve.sim.beam.workload`), the verifier scores the steps, and the top beams
are kept and duplicated (:mod:`reasonserve.sim.beam.tree`); selection reads only the
recorded scores, so no serving choice changes which beams are selected. Step times come
from the roofline cost model (:class:`~reasonserve.cost.roofline.RooflineCostModel`).

The baseline is vLLM-like: no speculation, FCFS order with a kept beam's copies enqueued
copy by copy (parents interleaved), a static KV split between the two models
(:meth:`~reasonserve.sim.beam.models.BeamSetting.baseline_kv_bytes`), prefix caching on,
256 sequences per model. The FlashTTS parts are switches of
:class:`~reasonserve.sim.beam.config.BeamServeConfig`: ``prefix_aware``, ``roofline``,
``speculation`` and ``lookahead``.
"""

from __future__ import annotations

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.sim.beam.config import BeamServeConfig, BeamServeResult
from reasonserve.sim.beam.run import BeamRun
from reasonserve.sim.beam.workload import BeamRequest, StepPool

__all__ = ["simulate_beam_search"]


def simulate_beam_search(
    requests: list[BeamRequest], pool: StepPool, config: BeamServeConfig
) -> BeamServeResult:
    """Serve ``requests`` with ``config`` until every search ends; deterministic."""
    if not requests:
        raise InvalidArgumentError("requests is empty")
    if not isinstance(config, BeamServeConfig):
        raise InvalidArgumentError(f"config must be a BeamServeConfig, got {type(config).__name__}")
    if any(r.prompt_tokens >= config.search.max_model_len for r in requests):
        raise InvalidArgumentError(f"a prompt is longer than max_model_len={config.search.max_model_len}")
    if len({r.request_id for r in requests}) != len(requests):
        raise InvalidArgumentError("request ids must be unique")
    ordered = sorted(requests, key=lambda r: (r.arrival_s, r.request_id))
    return BeamRun(ordered, pool, config).run()
