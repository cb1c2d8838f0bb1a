"""Simulator configuration, validated at construction."""

from __future__ import annotations

from dataclasses import dataclass

from reasonserve.core.checks import check_int
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.cost.hardware import HARDWARE
from reasonserve.cost.model_spec import MODELS
from reasonserve.cost.profile import ProfileCostModel, ProfileTable
from reasonserve.cost.roofline import RooflineCostModel

__all__ = ["SimConfig"]


@dataclass(frozen=True, slots=True)
class SimConfig:
    """N identical instances of ``model`` on ``hardware``. ``kv_capacity_tokens=None``
    derives each instance's KV capacity from the memory left beside the weights at
    ``gpu_memory_utilization`` (vLLM's default 0.9). SLO targets are PASCAL's.
    ``decode_steps_per_event`` > 1 lets a decode-only batch run that many iterations per
    policy decision (faster; the approximation is described in :mod:`reasonserve.sim.cluster.run`).
    ``profile``: time steps with a table fitted from measured engine steps
    (:mod:`reasonserve.cost.profile`) instead of the roofline model.
    ``skip_quiet_steps`` (with ``decode_steps_per_event=1``): run the decode steps a policy
    declares decision-free (its ``quiet_steps``) as one event, with identical results
    (:mod:`reasonserve.sim.cluster.quiet`); False steps the event loop once per engine step.
    ``quantum_tokens``: the first quantum of PASCAL Algorithm 2's ``a_i`` (an instance's
    answering requests with fewer answer tokens than this; the paper's 500, §V-A)."""

    num_instances: int = 8
    hardware: str = "h100"
    model: str = "qwen2.5-32b"
    block_size: int = 16
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    kv_capacity_tokens: int | None = None
    gpu_memory_utilization: float = 0.9
    preemption: str = "swap"  # the host's mode for Preempt(mode=None)
    tpot_slo_s: float = 0.1
    ttfat_slo_s: float = 0.25
    qoe_slo: float = 0.95
    max_sim_s: float = 1e7  # a guard against a policy that never lets work finish
    decode_steps_per_event: int = 1  # k > 1: coarse event steps (see reasonserve.sim.cluster.run)
    profile: ProfileTable | None = None  # step times from a fitted engine profile (else roofline)
    skip_quiet_steps: bool = True  # exact either way (see reasonserve.sim.cluster.quiet)
    quantum_tokens: int = 500  # a_i's first quantum (InstanceLoad.num_fresh_answering)

    def __post_init__(self) -> None:
        check_int("SimConfig.num_instances", self.num_instances, 1)
        for name in ("block_size", "max_num_seqs", "max_num_batched_tokens", "decode_steps_per_event",
                     "quantum_tokens"):  # fmt: skip
            check_int(f"SimConfig.{name}", getattr(self, name), 1)
        if self.hardware not in HARDWARE:
            raise InvalidArgumentError(
                f"SimConfig.hardware must be one of {sorted(HARDWARE)}, got {self.hardware!r}"
            )
        if self.model not in MODELS:
            raise InvalidArgumentError(f"SimConfig.model must be one of {sorted(MODELS)}, got {self.model!r}")
        if self.profile is not None and not isinstance(self.profile, ProfileTable):
            kind = type(self.profile).__name__
            raise InvalidArgumentError(f"SimConfig.profile must be a ProfileTable or None, got {kind}")
        if not isinstance(self.skip_quiet_steps, bool):
            got = self.skip_quiet_steps
            raise InvalidArgumentError(f"SimConfig.skip_quiet_steps must be a bool, got {got!r}")
        if self.kv_capacity_tokens is not None:
            check_int("SimConfig.kv_capacity_tokens", self.kv_capacity_tokens, self.block_size)
        if not 0 < self.gpu_memory_utilization <= 1:
            raise InvalidArgumentError(
                f"SimConfig.gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization!r}"
            )
        if self.preemption not in ("recompute", "swap"):
            raise InvalidArgumentError(
                f"SimConfig.preemption must be 'recompute' or 'swap', got {self.preemption!r}"
            )
        for name in ("tpot_slo_s", "ttfat_slo_s", "qoe_slo", "max_sim_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise InvalidArgumentError(f"SimConfig.{name} must be a number > 0, got {value!r}")
        self.num_blocks  # noqa: B018 - raises if the model does not fit

    def cost_model(self) -> RooflineCostModel | ProfileCostModel:
        roofline = RooflineCostModel(HARDWARE[self.hardware], MODELS[self.model])
        return roofline if self.profile is None else ProfileCostModel(self.profile, roofline)

    @property
    def num_blocks(self) -> int:
        tokens = self.kv_capacity_tokens
        if tokens is None:
            tokens = self.cost_model().kv_capacity_tokens(self.gpu_memory_utilization)
        return tokens // self.block_size
