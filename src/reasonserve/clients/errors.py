"""Typed errors of the engine clients (all derive from :class:`ReasonserveError`).

Bad arguments raise :class:`~reasonserve.core.errors.InvalidArgumentError`; what goes
wrong on the way to a host raises one of these, carrying the HTTP status and the
host's message where there is one.
"""

from __future__ import annotations

from reasonserve.core.errors import ReasonserveError

__all__ = [
    "ClientError",
    "HostError",
    "HostRejectedError",
    "MalformedResponseError",
    "RequestTimeoutError",
    "StreamDroppedError",
    "TransportError",
    "UnsupportedError",
]


class ClientError(ReasonserveError, RuntimeError):
    """Base class: a request to a host failed."""


class UnsupportedError(ClientError):
    """The client or its host cannot do this (e.g. ``score`` without a reward model)."""


class HostError(ClientError):
    """The host answered with an error status. ``status``: the HTTP status (5xx here)."""

    def __init__(self, message: str, *, status: int | None = None, body: str = "") -> None:
        super().__init__(message)
        self.status, self.body = status, body[:2000]


class HostRejectedError(HostError):
    """The host rejected the request (4xx): retrying the same request will not help."""


class TransportError(ClientError):
    """The connection could not be made or broke before a reply."""


class RequestTimeoutError(ClientError):
    """No reply (or no progress on a stream) within the client's timeout."""


class StreamDroppedError(ClientError):
    """A stream ended without its final event (connection closed mid-stream)."""


class MalformedResponseError(ClientError):
    """The host's reply is not what the protocol says (bad JSON, bad SSE, wrong shape)."""
