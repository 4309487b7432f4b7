"""OpenAI-style error objects: every failure is a JSON ``{"error": {...}}``
with a status code and a message naming the problem; nothing internal leaks."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
          405: "invalid_request_error", 413: "invalid_request_error", 422: "invalid_request_error",
          429: "rate_limit_error", 503: "service_unavailable", 500: "internal_error"}

logger = logging.getLogger(__name__)

_NOT_JSON = "the request body is not valid JSON (or not UTF-8)"
_FASTAPI_BODY_ERROR = "There was an error parsing the body"


class APIError(Exception):
    def __init__(self, status_code: int, message: str, *, param: str | None = None,
                 code: str | None = None, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.param = param
        self.code = code
        self.headers = dict(headers or {})


def error_body(status_code: int, message: str, param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": _TYPES.get(status_code, "invalid_request_error"),
                      "param": param, "code": code}}


def error_response(error: APIError) -> JSONResponse:
    return JSONResponse(error_body(error.status_code, error.message, error.param, error.code),
                        status_code=error.status_code, headers=error.headers)


def validation_message(errors: Sequence[Any]) -> tuple[str, str | None]:
    """One line naming the first problem of a request body, and its field."""
    first = errors[0] if errors else {}
    loc = [str(part) for part in first.get("loc", ()) if part != "body"]
    kind = first.get("type", "")
    if kind == "json_invalid":
        return _NOT_JSON, None
    if kind == "extra_forbidden":
        return f"unknown field {'.'.join(loc)!r}", ".".join(loc) or None
    if kind == "missing":
        return f"missing required field {'.'.join(loc)!r}", ".".join(loc) or None
    field = ".".join(loc) or "body"
    return f"{field}: {first.get('msg', 'invalid value')}", field


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = validation_message(exc.errors())
        return error_response(APIError(400, message, param=param))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else "request failed"
        if message == _FASTAPI_BODY_ERROR:  # FastAPI's words for a body it cannot decode
            message = _NOT_JSON
        return error_response(APIError(exc.status_code, message, headers=exc.headers))

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        logger.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return error_response(APIError(500, "internal server error"))
