"""Errors in the OpenAI shape: ``{"error": {"message", "type", "param", "code"}}``.

Every response the server makes for a failure goes through :func:`error_response`,
whatever raised it: our own :class:`ApiError`, a request-validation error, an unknown
route (404) or method (405), or an unexpected exception (500, logged).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from reasonserve.core.errors import InvalidArgumentError

__all__ = ["ApiError", "AsciiJSONResponse", "error_body", "error_response", "install_error_handlers"]

_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    405: "MethodNotAllowedError",
    408: "RequestTimeoutError",
    413: "RequestEntityTooLargeError",
    415: "UnsupportedMediaTypeError",
    429: "RateLimitError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}
_log = logging.getLogger("reasonserve.serve")


class ApiError(Exception):
    """A failure with an HTTP status, an OpenAI error type and the parameter it concerns."""

    def __init__(
        self, status: int, message: str, *, param: str | None = None, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.headers = status, message, param, headers


def error_body(status: int, message: str, param: str | None = None) -> dict:
    kind = _TYPES.get(status, "BadRequestError" if status < 500 else "InternalServerError")
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


class AsciiJSONResponse(JSONResponse):
    """JSON with non-ASCII escaped: text echoed from a request (a lone surrogate in a model
    name, a ``vllm_xargs`` key, a message) cannot make the reply unencodable."""

    def render(self, content) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def error_response(err: ApiError) -> JSONResponse:
    return AsciiJSONResponse(
        error_body(err.status, err.message, err.param), status_code=err.status, headers=err.headers
    )


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_request: Request, err: ApiError) -> JSONResponse:
        return error_response(err)

    @app.exception_handler(InvalidArgumentError)
    async def invalid_argument(_request: Request, err: InvalidArgumentError) -> JSONResponse:
        return error_response(ApiError(400, str(err)))

    @app.exception_handler(HTTPException)
    async def http_error(_request: Request, err: HTTPException) -> JSONResponse:
        message = "Not Found" if err.status_code == 404 else str(err.detail)
        return error_response(ApiError(err.status_code, message, headers=err.headers))

    @app.exception_handler(Exception)
    async def unexpected(_request: Request, err: Exception) -> JSONResponse:
        _log.exception("unexpected error while serving a request")
        return error_response(ApiError(500, f"internal error: {type(err).__name__}"))
