"""Server limits, validated at construction (``reasonserve serve`` flags map onto these)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from reasonserve.core.errors import InvalidArgumentError

__all__ = ["ServeConfig"]


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """``max_tokens_limit``: largest ``max_tokens`` accepted. ``max_request_bytes``: body
    size limit, enforced while reading (chunked or not) -> 413. ``max_queued_requests``:
    engine requests (running + waiting) beyond which a request gets 429 + Retry-After.
    ``max_choices_per_request``: prompts x ``n``. ``max_connections``: uvicorn's
    ``limit_concurrency`` (503 beyond). ``header_timeout_s``/``body_timeout_s``: time a
    client has to send a request's headers / its whole body (slow clients are cut off).
    ``keep_alive_s``: idle keep-alive. ``drain_timeout_s``: SIGTERM waits this long for
    in-flight requests, then aborts them and exits."""

    model_name: str = "model"
    max_tokens_limit: int = 4096
    max_request_bytes: int = 1_000_000
    max_queued_requests: int = 256
    max_choices_per_request: int = 64
    max_connections: int = 1024
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keep_alive_s: float = 5.0
    drain_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not isinstance(self.model_name, str) or not self.model_name:
            raise InvalidArgumentError(f"model_name must be a non-empty str, got {self.model_name!r}")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "model_name" and (isinstance(value, bool) or not value > 0):
                raise InvalidArgumentError(f"{f.name} must be > 0, got {value!r}")
