"""A validated request + the gateway's defaults -> the :class:`ProgramPlan` that serves it.

Three programs: ``think`` (early exit off: one streamed pass, capped at the thinking
budget), ``cot`` (:class:`~reasonserve.programs.CoTWithProbe` with the request's stopping
rule) and ``sc`` (:class:`~reasonserve.programs.SelfConsistency`). Parameters the
gateway does not forward are 400s naming them; so are controls that contradict each
other (self-consistency with early exit or a thinking budget set in the same request).
"""

from __future__ import annotations

from dataclasses import dataclass

from reasonserve.certainindex import PRESETS, AgreeSpanRule, EvenPolicy, StoppingRule, ThresholdPolicy
from reasonserve.certainindex.stopping import WindowConsistencyRule
from reasonserve.gateway.config import GatewayConfig
from reasonserve.gateway.protocol import EarlyExitSpec, SelfConsistencySpec
from reasonserve.programs import CoTWithProbe, SelfConsistency
from reasonserve.programs.cot import host_default_rule
from reasonserve.serve.errors import ApiError

__all__ = ["ProgramPlan", "plan_program"]

_CERTIFIED_INTERVAL_TOKENS = 64  # the probe interval the shipped rule was fitted at (docs/certainindex.md)


@dataclass(frozen=True)
class ProgramPlan:
    """How one request is served. ``thinking_budget``: reasoning tokens at most;
    ``max_tokens``: reasoning plus answer tokens at most; ``stop``: the client's stop
    strings (they end the answer)."""

    kind: str  # "think" | "cot" | "sc"
    early_exit: str  # the name reported in the response and the metrics
    thinking_budget: int
    max_tokens: int
    temperature: float
    top_p: float
    seed: int | None
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool
    cot: CoTWithProbe | None = None
    sc: SelfConsistency | None = None
    sc_samples: int = 0


def plan_program(body, cfg: GatewayConfig, think_end: str, probe_suffix: str) -> ProgramPlan:
    """The plan for a parsed :mod:`~reasonserve.gateway.protocol` body (see module docstring)."""
    _reject_unsupported(body, cfg)
    max_tokens = _max_tokens(body, cfg)
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    sampling = dict(
        temperature=cfg.temperature if body.temperature is None else body.temperature,
        top_p=cfg.top_p if body.top_p is None else body.top_p,
        seed=body.seed,
    )
    common = dict(
        max_tokens=max_tokens,
        stop=stop,
        stream=body.stream,
        include_usage=bool(body.stream_options and body.stream_options.include_usage),
        **sampling,
    )
    sc = body.self_consistency or (cfg.default_self_consistency if body.early_exit is None else None)
    if sc is not None:
        for name in ("early_exit", "thinking_token_budget"):
            if getattr(body, name) not in (None, "off"):
                raise ApiError(400, f"{name} cannot be combined with self_consistency", param=name)
        return ProgramPlan(
            "sc",
            "off",
            max_tokens,
            sc=_self_consistency(sc, max_tokens, stop, sampling),
            sc_samples=sc.n,
            **common,
        )
    budget = body.thinking_token_budget
    budget = min(max_tokens, cfg.default_thinking_token_budget or max_tokens if budget is None else budget)
    choice = body.early_exit if body.early_exit is not None else cfg.default_early_exit
    if choice == "off" or budget == 0:  # a budget of 0: no thinking, nothing to probe
        return ProgramPlan("think", "off", budget, **common)
    rule, interval, name = _rule(choice)
    cot = CoTWithProbe(
        chunk_tokens=interval,
        max_tokens=budget,
        probe_tokens=cfg.probe_tokens,
        probe_suffix=probe_suffix,
        think_end=think_end,
        rule=rule,
        stop=(think_end,),
        **sampling,
    )
    return ProgramPlan("cot", name, budget, cot=cot, **common)


def _rule(choice) -> tuple[StoppingRule, int, str]:
    """(rule, probe interval in tokens, name) of an ``early_exit`` value other than "off"."""
    if choice == "certified":
        return host_default_rule(), _CERTIFIED_INTERVAL_TOKENS, "certified"
    if isinstance(choice, str):
        window, interval = PRESETS[choice]
        return AgreeSpanRule(k_probes=window, min_tokens=0, name=f"preset {choice}"), interval, choice
    assert isinstance(choice, EarlyExitSpec)
    if choice.rule == "certified":
        for name in sorted(choice.model_fields_set & {"agreement", "tolerance", "min_tokens", "hesitation"}):
            raise ApiError(
                400, f"early_exit.{name} is not a parameter of the certified rule", param=f"early_exit.{name}"
            )
        return host_default_rule(), choice.probe_interval_tokens, "certified"
    if choice.tolerance >= choice.agreement:
        raise ApiError(400, "early_exit.tolerance must be < agreement", param="early_exit.tolerance")
    min_tokens, hesitation = choice.min_tokens, choice.hesitation
    if choice.tolerance:
        rule: StoppingRule = WindowConsistencyRule(
            choice.agreement, choice.tolerance, min_tokens=min_tokens, hesitation=hesitation
        )
    else:
        rule = AgreeSpanRule(k_probes=choice.agreement, min_tokens=min_tokens, hesitation=hesitation)
    return rule, choice.probe_interval_tokens, "custom"


def _self_consistency(
    spec: SelfConsistencySpec, max_tokens: int, stop: tuple[str, ...], sampling: dict
) -> SelfConsistency:
    if spec.min_samples > spec.n:
        raise ApiError(400, "self_consistency.min_samples must be <= n", param="self_consistency.min_samples")
    if spec.stop == "none":
        policy: object = EvenPolicy(spec.n)
    else:
        threshold = 1.0 if spec.stop == "agreement" else spec.threshold
        policy = ThresholdPolicy(threshold, detect_at=spec.min_samples, max_knob=spec.n)
    return SelfConsistency(
        samples_per_step=min(spec.samples_per_step, spec.n),
        max_tokens=max_tokens,
        max_samples=spec.n,
        policy=policy,
        stop=stop,
        **sampling,
    )


def _max_tokens(body, cfg: GatewayConfig) -> int:
    requested = getattr(body, "max_completion_tokens", None) or body.max_tokens
    param = "max_completion_tokens" if getattr(body, "max_completion_tokens", None) else "max_tokens"
    if getattr(body, "max_completion_tokens", None) is not None and body.max_tokens not in (
        None,
        body.max_completion_tokens,
    ):
        raise ApiError(400, "max_tokens and max_completion_tokens disagree", param="max_completion_tokens")
    limit = cfg.limits.max_tokens_limit
    if requested is not None and requested > limit:
        raise ApiError(400, f"{param} must be <= {limit}, got {requested}", param=param)
    return requested or limit


# (parameter, is it set to something the gateway does not forward?)
_UNSUPPORTED = (
    ("n", lambda b: b.n != 1),
    ("best_of", lambda b: b.best_of not in (None, 1)),
    ("use_beam_search", lambda b: b.use_beam_search),
    ("top_k", lambda b: b.top_k not in (None, 0, -1)),
    ("min_p", lambda b: b.min_p not in (None, 0.0)),
    ("stop_token_ids", lambda b: bool(b.stop_token_ids)),
    ("include_stop_str_in_output", lambda b: b.include_stop_str_in_output),
    ("ignore_eos", lambda b: b.ignore_eos),
    ("min_tokens", lambda b: b.min_tokens > 0),
    ("presence_penalty", lambda b: b.presence_penalty != 0),
    ("frequency_penalty", lambda b: b.frequency_penalty != 0),
    ("repetition_penalty", lambda b: b.repetition_penalty not in (None, 1.0)),
    ("logit_bias", lambda b: bool(b.logit_bias)),
    ("prompt_logprobs", lambda b: b.prompt_logprobs is not None),
    ("skip_special_tokens", lambda b: not b.skip_special_tokens),
    ("response_format", lambda b: b.response_format not in (None, {"type": "text"})),
    ("priority", lambda b: b.priority != 0),
    ("return_token_ids", lambda b: b.return_token_ids),
    ("deterministic", lambda b: b.deterministic),
    ("vllm_xargs", lambda b: bool(b.vllm_xargs)),
    ("stream_options", lambda b: b.stream_options is not None and not b.stream),
    (
        "stream_options.continuous_usage_stats",
        lambda b: b.stream_options is not None and b.stream_options.continuous_usage_stats,
    ),
    ("logprobs", lambda b: bool(getattr(b, "logprobs", None))),
    ("top_logprobs", lambda b: getattr(b, "top_logprobs", None) is not None),
    ("echo", lambda b: getattr(b, "echo", False)),
    ("suffix", lambda b: getattr(b, "suffix", None) is not None),
    ("tools", lambda b: bool(getattr(b, "tools", None))),
    ("tool_choice", lambda b: getattr(b, "tool_choice", None) not in (None, "none")),
    ("chat_template", lambda b: getattr(b, "chat_template", None) is not None),
)


def _reject_unsupported(body, cfg: GatewayConfig) -> None:
    for name, bad in _UNSUPPORTED:
        if bad(body):
            hint = " (use self_consistency for several samples)" if name in ("n", "best_of") else ""
            raise ApiError(400, f"{name} is not supported by the gateway with this value{hint}", param=name)
    if body.model is not None and body.model != cfg.served_model_name:
        raise ApiError(404, f"The model `{body.model[:200]}` does not exist.", param="model")
