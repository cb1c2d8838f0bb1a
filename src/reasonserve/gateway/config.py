"""A gateway's settings, validated at construction (``reasonserve gateway`` flags map onto these)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import ValidationError

from reasonserve.core.checks import check_int, check_positive
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.gateway.protocol import EARLY_EXIT_ADAPTER, EarlyExit, SelfConsistencySpec
from reasonserve.serve.config import ServeConfig

__all__ = ["UPSTREAM_KINDS", "GatewayConfig"]

UPSTREAM_KINDS = ("openai", "vllm", "sglang", "reasonserve")


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """``upstream_url``: the server the programs run on; ``upstream_kind``: how to talk to
    it (``openai``: OpenAI fields only, text prompts; ``vllm``: vLLM's extensions, token
    ids, priorities lower-first; ``sglang``: SGLang's native ``/generate``;
    ``reasonserve``: ``reasonserve serve``, its extensions, priorities lower-first).
    ``upstream_model``: the ``model`` sent upstream (None: left out; SGLang ignores it).
    ``served_model_name``: the id clients use. ``tokenizer``: a local tokenizer folder or
    hub id whose chat template renders chat requests (None: the upstream's ``/tokenize``
    renders them, as vLLM's does). The ``default_*`` fields apply to requests that do not
    set ``early_exit``, ``thinking_token_budget`` or ``self_consistency``.
    ``program_timeout_s``: a whole program's deadline (504 after it);
    ``upstream_timeout_s``: one upstream reply, or one stream's silence (504).
    ``priorities``: send program-aware priorities upstream
    (:mod:`~reasonserve.gateway.scheduling`). ``max_programs``: programs in flight
    (beyond: 429; ``limits.max_queued_requests`` is not used). ``limits``: the HTTP
    limits shared with ``reasonserve serve``."""

    upstream_url: str
    upstream_kind: str = "vllm"
    served_model_name: str = "reasoning"
    upstream_model: str | None = None
    tokenizer: str | None = None
    reasoning_parser: str = "deepseek_r1"
    default_early_exit: EarlyExit = "certified"
    default_thinking_token_budget: int | None = None
    default_self_consistency: SelfConsistencySpec | None = None
    probe_suffix: str | None = None
    probe_tokens: int = 20
    temperature: float = 0.6
    top_p: float = 0.95
    priorities: bool = True
    starvation_bound_s: float = 60.0
    program_timeout_s: float = 3600.0
    upstream_timeout_s: float = 600.0
    connect_timeout_s: float = 5.0
    max_programs: int = 256
    limits: ServeConfig = field(default_factory=ServeConfig)

    def __post_init__(self) -> None:
        if not isinstance(self.upstream_url, str) or not self.upstream_url.startswith(
            ("http://", "https://")
        ):
            raise InvalidArgumentError(f"upstream_url must be an http(s) URL, got {self.upstream_url!r}")
        if self.upstream_kind not in UPSTREAM_KINDS:
            raise InvalidArgumentError(
                f"upstream_kind must be one of {UPSTREAM_KINDS}, got {self.upstream_kind!r}"
            )
        if not isinstance(self.served_model_name, str) or not self.served_model_name:
            raise InvalidArgumentError("served_model_name must be a non-empty str")
        for name in ("probe_tokens", "max_programs"):
            check_int(name, getattr(self, name), 1)
        for name in ("starvation_bound_s", "program_timeout_s", "upstream_timeout_s", "connect_timeout_s"):
            check_positive(name, getattr(self, name))
        budget = self.default_thinking_token_budget
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
            raise InvalidArgumentError(f"default_thinking_token_budget must be an int >= 1, got {budget!r}")
        if self.probe_suffix is not None and (
            not isinstance(self.probe_suffix, str) or not self.probe_suffix
        ):
            raise InvalidArgumentError("probe_suffix must be a non-empty str or None")
        try:
            EARLY_EXIT_ADAPTER.validate_python(self.default_early_exit)
        except ValidationError:
            raise InvalidArgumentError(
                f"default_early_exit is not an early_exit value: {self.default_early_exit!r}"
            ) from None
        sc = self.default_self_consistency
        if sc is not None and not isinstance(sc, SelfConsistencySpec):
            raise InvalidArgumentError("default_self_consistency must be a SelfConsistencySpec or None")
        if not isinstance(self.limits, ServeConfig):
            raise InvalidArgumentError("limits must be a ServeConfig")
