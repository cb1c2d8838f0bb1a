"""Server limits, validated at construction (``reasonserve serve`` flags map onto these)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.serve.reasoning_parser import get_reasoning_parser

__all__ = ["ServeConfig"]

_NOT_LIMITS = ("model_name", "chat_template", "trust_request_chat_template", "reasoning_parser")


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """``max_tokens_limit``: largest ``max_tokens`` accepted. ``max_request_bytes``: body
    size limit, enforced while reading (chunked or not) -> 413. ``max_queued_requests``:
    engine requests (running + waiting) beyond which a request gets 429 + Retry-After.
    ``max_choices_per_request``: prompts x ``n``. ``max_connections``: requests
    served at once, ``/health`` and ``/metrics`` excepted (503 beyond, before the body is
    read; ``serve/limits.py``). ``header_timeout_s``/``body_timeout_s``: time a
    client has to send a request's headers / its whole body (slow clients are cut off).
    ``send_timeout_s``: time a reply may stay stalled because its client does not read it
    (then the connection is dropped and the request aborted).
    ``keep_alive_s``: idle keep-alive. ``drain_timeout_s``: SIGTERM waits this long for
    in-flight requests, then aborts them and exits. ``chat_template``: the template text
    for chat requests (``--chat-template``; default: the tokenizer's);
    ``trust_request_chat_template``: accept a request's own ``chat_template``.
    ``reasoning_parser``: ``--reasoning-parser`` name (None: reasoning stays in the
    content)."""

    model_name: str = "model"
    max_tokens_limit: int = 4096
    max_request_bytes: int = 1_000_000
    max_queued_requests: int = 256
    max_choices_per_request: int = 64
    max_connections: int = 1024
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    send_timeout_s: float = 30.0
    keep_alive_s: float = 5.0
    drain_timeout_s: float = 10.0
    chat_template: str | None = None
    trust_request_chat_template: bool = False
    reasoning_parser: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.model_name, str) or not self.model_name:
            raise InvalidArgumentError(f"model_name must be a non-empty str, got {self.model_name!r}")
        if self.chat_template is not None and not isinstance(self.chat_template, str):
            raise InvalidArgumentError("chat_template must be the template text or None")
        if not isinstance(self.trust_request_chat_template, bool):
            raise InvalidArgumentError("trust_request_chat_template must be a bool")
        if self.reasoning_parser is not None:
            get_reasoning_parser(self.reasoning_parser)
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name not in _NOT_LIMITS and (isinstance(value, bool) or not value > 0):
                raise InvalidArgumentError(f"{f.name} must be > 0, got {value!r}")
