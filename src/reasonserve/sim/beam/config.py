"""Beam-search serving on one GPU (FlashTTS §3-4): configuration and results.

A generator and a PRM verifier share one instance's KV memory. Requests (beam searches)
arrive as a Poisson process; each iteration every active beam extends by one recorded
step (variable length), the verifier scores the steps, and the top beams are kept and
duplicated (:mod:`reasonserve.sim.beam.tree`). Costs come from the roofline cost model.

The baseline is vLLM-like: no speculation, FCFS order with a kept beam's copies enqueued
copy by copy (parents interleaved), a static KV split between the two models (two vLLM
instances, :meth:`~reasonserve.sim.beam.models.BeamSetting.baseline_kv_bytes`), prefix
caching on. Each FlashTTS part is a switch: ``prefix_aware`` (greedy prefix order,
:func:`~reasonserve.policies.flashtts.prefix.prefix_order`), ``roofline`` (the KV split and
batch sizes of :class:`~reasonserve.policies.flashtts.kv.RooflineKVAllocator`),
``speculation`` (speculative beam extension with SelectSpec and the two-phase control)
and ``lookahead`` (look-ahead verification; on with speculation unless set).

Precise goodput = mean tokens per finished beam / mean beam completion time (from the
request's arrival to the verification that finished the beam).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.policies.flashtts.kv import KVPlan
from reasonserve.policies.flashtts.spec import SelectSpec
from reasonserve.sim.beam.models import BeamSetting
from reasonserve.sim.beam.workload import BeamSearchSpec

__all__ = ["ROOFLINE_PLANS", "BeamServeConfig", "BeamServeResult"]

# How ``roofline`` plans (:meth:`~reasonserve.policies.flashtts.kv.RooflineKVAllocator.plan`):
# "whole_beams": the paper's formula (the verifier prefills and holds whole beams, the
# generator holds only its step); "cached_verifier": the verifier's prefix cache as served
# (new step prefilled, tree-shared prefixes held), the generator as the paper; "prefix_cached":
# both models as served (the generator also holds and attends to its beam's shared context).
ROOFLINE_PLANS = ("whole_beams", "cached_verifier", "prefix_cached")


@dataclass(frozen=True, slots=True)
class BeamServeConfig:
    setting: BeamSetting
    search: BeamSearchSpec = field(default_factory=BeamSearchSpec)
    prefix_aware: bool = False
    roofline: bool = False
    speculation: bool = False
    lookahead: bool | None = None  # None: on with speculation
    max_num_seqs: int = 256  # vLLM's default, per model, when not set by the allocator
    truncation_mean: float = 0.85
    verifier_prefix_caching: bool = True  # False: the verifier prefills whole beams every iteration
    # what the roofline allocator is told about the two models (ROOFLINE_PLANS)
    roofline_plan: str = "prefix_cached"
    # beams sharing each context token, for the plan (None: the branching factor, siblings only;
    # a measured value: :func:`~reasonserve.sim.beam.tree.context_share` of warm-up searches)
    roofline_prefix_share: float | None = None

    def __post_init__(self) -> None:
        for fname in ("prefix_aware", "roofline", "speculation", "verifier_prefix_caching"):
            if not isinstance(getattr(self, fname), bool):
                raise InvalidArgumentError(f"{fname} must be a bool, got {getattr(self, fname)!r}")
        if self.lookahead not in (None, True, False):
            raise InvalidArgumentError(f"lookahead must be None or a bool, got {self.lookahead!r}")
        if self.lookahead and not self.speculation:
            raise InvalidArgumentError("lookahead verification needs speculation=True")
        if (
            isinstance(self.max_num_seqs, bool)
            or not isinstance(self.max_num_seqs, int)
            or self.max_num_seqs < 1
        ):
            raise InvalidArgumentError(f"max_num_seqs must be an int >= 1, got {self.max_num_seqs!r}")
        if self.roofline_plan not in ROOFLINE_PLANS:
            raise InvalidArgumentError(
                f"roofline_plan must be one of {ROOFLINE_PLANS}, got {self.roofline_plan!r}"
            )
        h = self.roofline_prefix_share
        bad_share = isinstance(h, bool) or not isinstance(h, (int, float)) or not 1 <= h < math.inf
        if h is not None and bad_share:
            raise InvalidArgumentError(f"roofline_prefix_share must be None or a finite number >= 1: {h!r}")
        self.selector()  # validates truncation_mean

    @property
    def use_lookahead(self) -> bool:
        return self.speculation if self.lookahead is None else self.lookahead

    def selector(self) -> SelectSpec:
        return SelectSpec(branching=self.search.branching, truncation_mean=self.truncation_mean)


@dataclass(slots=True)
class BeamServeResult:
    """``beams``: (request id, beam id, tokens, completion s) per finished beam;
    ``selections``: per request, the kept beam ids of every iteration."""

    beams: list[tuple[str, str, int, float]]
    latencies_s: dict[str, float]
    selections: dict[str, tuple[tuple[str, ...], ...]]
    counters: dict[str, float]
    plan: KVPlan | None
    capacities: dict[str, int]

    def summary(self) -> dict:
        if not self.beams:
            raise InvalidArgumentError("no beam finished: nothing to summarize")
        tokens = statistics.fmean(b[2] for b in self.beams)
        completion = statistics.fmean(b[3] for b in self.beams)
        lat = sorted(self.latencies_s.values())
        return {
            "precise_goodput_tokens_s": tokens / completion,
            "mean_tokens_per_beam": tokens,
            "mean_beam_completion_s": completion,
            "mean_latency_s": statistics.fmean(lat),
            "p90_latency_s": lat[min(len(lat) - 1, int(0.9 * len(lat)))],
            "finished_beams": len(self.beams),
            "requests": len(lat),
            **self.counters,
            "capacities_tokens": dict(self.capacities),
            "plan": None if self.plan is None else {k: getattr(self.plan, k) for k in self.plan.__slots__},
        }
