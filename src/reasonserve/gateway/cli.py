"""``reasonserve gateway``: the command line of :mod:`reasonserve.gateway` (flags map onto
:class:`~reasonserve.gateway.config.GatewayConfig` and the serve limits)."""

from __future__ import annotations

import argparse
import json

from reasonserve.core.errors import InvalidArgumentError

__all__ = ["add_gateway_parser", "gateway_config", "run_gateway"]

_LIMITS = (
    ("max-tokens-limit", int, 32768, "largest max_tokens a request may ask for"),
    ("max-request-bytes", int, 1_000_000, "largest request body; beyond: 413"),
    ("max-connections", int, 1024, "requests served at once (/health exempt); beyond: 503"),
    ("header-timeout-s", float, 10.0, "seconds to receive a request's headers"),
    ("body-timeout-s", float, 30.0, "seconds to receive a request's body"),
    ("send-timeout-s", float, 30.0, "seconds a reply may stall on a client that does not read it"),
    ("drain-timeout-s", float, 10.0, "seconds running programs get to finish after SIGTERM"),
)


def add_gateway_parser(sub) -> None:
    p = sub.add_parser(
        "gateway",
        help="OpenAI-compatible gateway: early exit and self-consistency in front of "
        "a vLLM, SGLang or OpenAI-compatible server (docs/gateway.md)",
    )
    p.add_argument(
        "--upstream", required=True, help="base URL of the upstream server, e.g. http://127.0.0.1:8000"
    )
    p.add_argument(
        "--upstream-kind", default="vllm", help="openai | vllm | sglang | reasonserve (default vllm)"
    )
    p.add_argument(
        "--served-model-name", default="reasoning", help="model id clients use (default: reasoning)"
    )
    p.add_argument("--upstream-model", default=None, help="model name sent upstream (default: left out)")
    p.add_argument(
        "--tokenizer",
        default=None,
        help="tokenizer folder or hub id whose chat template renders chats "
        "(default: the upstream's /tokenize, vLLM)",
    )
    p.add_argument("--reasoning-parser", default="deepseek_r1", help="deepseek_r1 | qwen3 (the <think> tags)")
    p.add_argument(
        "--early-exit",
        default="certified",
        help="default early_exit: off | certified | mild | low | "
        "mid | high | crazy | a JSON object (docs/gateway.md)",
    )
    p.add_argument("--thinking-token-budget", type=int, default=None, help="default reasoning-token cap")
    p.add_argument(
        "--self-consistency", default=None, help="default self_consistency, JSON, e.g. '{\"n\": 8}'"
    )
    p.add_argument("--probe-tokens", type=int, default=20, help="tokens each probe decodes")
    p.add_argument("--temperature", type=float, default=0.6, help="default sampling temperature")
    p.add_argument("--top-p", type=float, default=0.95, help="default top_p")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    p.add_argument("--port", type=int, default=8100, help="port (default 8100)")
    p.add_argument(
        "--no-priorities",
        dest="priorities",
        action="store_false",
        help="send no priorities upstream (an upstream that does not schedule by priority)",
    )
    p.add_argument("--max-programs", type=int, default=256, help="programs in flight; beyond: 429")
    p.add_argument("--program-timeout-s", type=float, default=3600.0,
                   help="seconds a program may run in all; then 504 (default 3600)")
    p.add_argument("--upstream-timeout-s", type=float, default=600.0,
                   help="seconds for one upstream reply or one silence in a stream; then 504 (default 600)")
    p.add_argument("--starvation-bound-s", type=float, default=60.0, help="escalate programs older than this")
    for flag, kind, default, what in _LIMITS:
        p.add_argument(f"--{flag}", type=kind, default=default, help=f"{what} (default {default})")


def _json_flag(flag: str, text: str | None):
    if text is None or not text.lstrip().startswith("{"):
        return text
    try:
        return json.loads(text)
    except ValueError as err:
        raise InvalidArgumentError(f"--{flag}: not a JSON object: {err}") from None


def gateway_config(args: argparse.Namespace):
    """The :class:`GatewayConfig` of parsed flags (typed errors for bad values)."""
    from pydantic import ValidationError

    from reasonserve.gateway.config import GatewayConfig
    from reasonserve.gateway.protocol import EARLY_EXIT_ADAPTER, SelfConsistencySpec
    from reasonserve.serve.config import ServeConfig

    try:
        early_exit = EARLY_EXIT_ADAPTER.validate_python(_json_flag("early-exit", args.early_exit))
        sc = _json_flag("self-consistency", args.self_consistency)
        sc = None if sc is None else SelfConsistencySpec.model_validate(sc)
    except ValidationError as err:
        raise InvalidArgumentError(f"--early-exit/--self-consistency: {err.errors()[0]['msg']}") from None
    limits = ServeConfig(
        **{flag.replace("-", "_"): getattr(args, flag.replace("-", "_")) for flag, *_ in _LIMITS}
    )
    return GatewayConfig(
        args.upstream,
        upstream_kind=args.upstream_kind,
        served_model_name=args.served_model_name,
        upstream_model=args.upstream_model,
        tokenizer=args.tokenizer,
        reasoning_parser=args.reasoning_parser,
        default_early_exit=early_exit,
        default_thinking_token_budget=args.thinking_token_budget,
        default_self_consistency=sc,
        probe_tokens=args.probe_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        starvation_bound_s=args.starvation_bound_s,
        priorities=args.priorities,
        program_timeout_s=args.program_timeout_s,
        upstream_timeout_s=args.upstream_timeout_s,
        max_programs=args.max_programs,
        limits=limits,
    )


def run_gateway(args: argparse.Namespace) -> int:
    from reasonserve.gateway.server import serve_gateway

    return serve_gateway(gateway_config(args), host=args.host, port=args.port)
