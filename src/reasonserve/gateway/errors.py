"""A failed program -> the HTTP error the client gets, in the OpenAI error shape.

* no reply, or no progress on a stream, within the upstream timeout, or the program
  past its deadline -> **504**;
* the upstream rejected a request as malformed (400, 413, 422) -> **400** with its
  message (the client's parameters did not fit the upstream, e.g. its context length);
* any other upstream error status, a refused or broken connection, a stream cut short,
  a reply that is not the protocol (bad JSON, bad SSE, wrong shape) -> **502**.
"""

from __future__ import annotations

from reasonserve.clients.errors import HostRejectedError, RequestTimeoutError
from reasonserve.gateway.program import ProgramTimeoutError
from reasonserve.programs import ProgramError
from reasonserve.serve.errors import ApiError

__all__ = ["upstream_error"]

_CLIENT_FAULTS = (400, 413, 422)


def upstream_error(err: BaseException) -> ApiError:
    """The :class:`ApiError` for ``err`` (a program's or an upstream call's failure)."""
    if isinstance(err, ApiError):
        return err
    cause = err.__cause__ if isinstance(err, ProgramError) and err.__cause__ is not None else err
    text = str(cause)[:500]
    if isinstance(cause, (RequestTimeoutError, ProgramTimeoutError, TimeoutError)):
        return ApiError(504, f"upstream timeout: {text}")
    if isinstance(cause, HostRejectedError) and cause.status in _CLIENT_FAULTS:
        return ApiError(400, f"the upstream rejected the request: {text}")
    return ApiError(502, f"upstream failure: {type(cause).__name__}: {text}")
