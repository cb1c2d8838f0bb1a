"""Beam-search serving on one GPU (FlashTTS §3-4): a generator and a PRM verifier share one
instance's KV; requests are beam searches whose steps come from recordings. The entry
point is :func:`~reasonserve.sim.beam.search.simulate_beam_search`; the FlashTTS policies it
composes live in :mod:`reasonserve.policies.flashtts`."""

from reasonserve.sim.beam.config import BeamServeConfig, BeamServeResult
from reasonserve.sim.beam.models import BEAM_MODELS, BEAM_SETTINGS, BeamSetting
from reasonserve.sim.beam.search import simulate_beam_search
from reasonserve.sim.beam.workload import (
    BeamRequest,
    BeamSearchSpec,
    StepPool,
    count_tokens,
    load_step_pool,
    one_at_a_time_requests,
    poisson_beam_requests,
)

__all__ = [
    "BEAM_MODELS",
    "BEAM_SETTINGS",
    "BeamRequest",
    "BeamSearchSpec",
    "BeamServeConfig",
    "BeamServeResult",
    "BeamSetting",
    "StepPool",
    "count_tokens",
    "load_step_pool",
    "one_at_a_time_requests",
    "poisson_beam_requests",
    "simulate_beam_search",
]
