"""Configuration of the Ray Serve app, validated at construction."""

from __future__ import annotations

from dataclasses import dataclass, field

from reasonserve.core.checks import check_int
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.engine import EngineConfig
from reasonserve.serve.config import ServeConfig

__all__ = ["ROUTERS", "RayServeConfig"]

ROUTERS = ("pascal", "pow2")


@dataclass(frozen=True, slots=True)
class RayServeConfig:
    """``model``: HF-format checkpoint folder every replica loads. ``router``: "pascal"
    (:class:`PascalRequestRouter`) or "pow2" (Ray Serve's default power-of-two-choices;
    the answering phase then stays where it reasoned). ``migrate``/``adaptive``: PASCAL's
    ablation flags. ``stats_period_s``: how often Ray Serve asks each replica for its
    routing stats; stats older than ``stats_max_age_s`` are stale and the router falls
    back (default: three periods, because the stats travel replica -> controller ->
    handle and the controller polls with jitter). ``quantum_tokens``: a_i's first
    quantum; ``tpot_s``: t_i's pace. ``max_migration_retries``: how often a request whose
    replica died is resumed elsewhere from its committed tokens before it fails."""

    model: str
    num_replicas: int = 2
    engine: EngineConfig = field(default_factory=EngineConfig)
    router: str = "pascal"
    migrate: bool = True
    adaptive: bool = True
    stats_period_s: float = 0.2
    stats_max_age_s: float | None = None
    num_cpus_per_replica: float = 0.5
    torch_threads_per_replica: int = 1
    max_ongoing_requests: int = 64
    quantum_tokens: int = 500
    tpot_s: float = 0.1
    max_migration_retries: int = 2
    app_name: str = "reasonserve"
    serve: ServeConfig = field(default_factory=ServeConfig)  # the ingress's API limits and model name

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise InvalidArgumentError(f"model must be a non-empty path, got {self.model!r}")
        if self.router not in ROUTERS:
            raise InvalidArgumentError(f"router must be one of {ROUTERS}, got {self.router!r}")
        if not isinstance(self.engine, EngineConfig) or not isinstance(self.serve, ServeConfig):
            raise InvalidArgumentError("engine must be an EngineConfig and serve a ServeConfig")
        for name in ("num_replicas", "torch_threads_per_replica", "max_ongoing_requests", "quantum_tokens"):
            check_int(name, getattr(self, name), 1)
        if not isinstance(self.max_migration_retries, int) or self.max_migration_retries < 0:
            raise InvalidArgumentError(
                f"max_migration_retries must be an int >= 0, got {self.max_migration_retries!r}"
            )
        for name in ("stats_period_s", "num_cpus_per_replica", "tpot_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise InvalidArgumentError(f"{name} must be a number > 0, got {value!r}")
        age = self.stats_max_age_s
        if age is not None and (
            isinstance(age, bool) or not isinstance(age, (int, float)) or age < self.stats_period_s
        ):
            raise InvalidArgumentError(
                f"stats_max_age_s must be >= stats_period_s ({self.stats_period_s}), got {age!r}"
            )

    @property
    def max_stats_age_s(self) -> float:
        return self.stats_max_age_s if self.stats_max_age_s is not None else 3 * self.stats_period_s
