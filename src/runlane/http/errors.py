"""Every error of the HTTP API is a JSON body with a ``type``, a ``message`` and the class name
of the error as ``error``; refusals carry what a caller needs to back off (key, limit, ...)."""

from __future__ import annotations

import math
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from ..errors import (
    ConcurrencyLimitError,
    DefinitionError,
    KeyFunctionError,
    PayloadCodecError,
    RateLimitError,
    RunExistsError,
    RunFinishedError,
    RunlaneError,
    RunNotFoundError,
    ScheduleNotFoundError,
    SerializationError,
    SingletonQueueFullError,
    StoreUnavailableError,
    UnknownWorkflowError,
    UpdateRejectedError,
)

RETRY_AFTER = "1"


class HTTPError(Exception):
    """An error answered as it is: ``status``, ``type``, ``message`` and extra fields."""

    def __init__(self, status: int, type: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"type": type, "error": _ERROR_NAMES.get(status, "BadRequest"), **extra}
        self.body["message"] = message


def invalid(message: str, **extra: Any) -> HTTPError:
    """A request that is well formed but asks for something invalid: 422."""
    return HTTPError(422, "invalid_request", message, **extra)


_ERROR_NAMES = {401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed"}

# (error class, HTTP status, type), most specific first.
_MAPPING: tuple[tuple[type[Exception], int, str], ...] = (
    (ConcurrencyLimitError, 429, "concurrency_limit"),
    (SingletonQueueFullError, 429, "singleton_queue_full"),
    (RateLimitError, 429, "rate_limit"),
    (StoreUnavailableError, 503, "store_unavailable"),
    (UnknownWorkflowError, 404, "unknown_workflow"),
    (RunNotFoundError, 404, "run_not_found"),
    (ScheduleNotFoundError, 404, "schedule_not_found"),
    (RunExistsError, 409, "run_exists"),
    (RunFinishedError, 409, "run_finished"),
    (UpdateRejectedError, 409, "update_rejected"),
    (PayloadCodecError, 409, "payload_undecodable"),
    (SerializationError, 422, "invalid_input"),
    (KeyFunctionError, 422, "invalid_input"),
    (DefinitionError, 422, "invalid_input"),
    (ValueError, 422, "invalid_input"),
    (RunlaneError, 409, "conflict"),
)


def error_response(exc: Exception) -> JSONResponse:
    """The HTTP answer for an exception raised by the engine or by request parsing."""
    if isinstance(exc, HTTPError):
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse(exc.body, exc.status, headers=headers)
    status, body = error_body(exc)
    headers = {"Retry-After": _retry_after(exc)} if status in (429, 503) else None
    return JSONResponse(body, status, headers=headers)


def error_body(exc: Exception) -> tuple[int, dict[str, Any]]:
    """An engine error's HTTP status and JSON body (a batch's item carries them as they are)."""
    if isinstance(exc, HTTPError):
        return exc.status, exc.body
    status, kind = next((s, t) for cls, s, t in _MAPPING if isinstance(exc, cls))
    body = {"type": kind, "error": exc.__class__.__name__}
    body.update(message=str(exc), **_details(exc))
    return status, body


def error_item(exc: Exception) -> dict[str, Any]:
    """A refused start of a batch: its status and error body, and for a 429 or a 503 the
    seconds its ``Retry-After`` would have said."""
    status, body = error_body(exc)
    item: dict[str, Any] = {"status": status, "error": body}
    if status in (429, 503):
        item["retry_after"] = int(_retry_after(exc))
    return item


def _retry_after(exc: Exception) -> str:
    """Whole seconds until a retry may succeed: a rate limit says when its window has room."""
    if isinstance(exc, RateLimitError):
        return str(max(1, math.ceil(exc.retry_after)))
    return RETRY_AFTER


def _details(exc: Exception) -> dict[str, Any]:
    if isinstance(exc, ConcurrencyLimitError):
        return {"workflow": exc.workflow, "key": exc.key, "limit": exc.limit, "active": exc.active}
    if isinstance(exc, SingletonQueueFullError):
        return {"workflow": exc.workflow, "key": exc.key, "max_queue_depth": exc.max_queue_depth}
    if isinstance(exc, RateLimitError):
        limits = {"limit": exc.limit, "period": exc.period, "retry_after": exc.retry_after}
        return {"workflow": exc.workflow, "key": exc.key, **limits}
    if isinstance(exc, KeyFunctionError):
        return {"workflow": exc.workflow, "gate": exc.gate, "reason": exc.reason}
    if isinstance(exc, RunExistsError | RunFinishedError):
        return {"run_id": exc.run_id, "status": str(exc.status)}
    if isinstance(exc, UpdateRejectedError):
        return {"run_id": exc.run_id, "name": exc.name}
    if isinstance(exc, PayloadCodecError):
        return {"subject": exc.subject, "what": exc.what}
    return {}


async def http_exception(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's own errors (no such route, method not allowed) in the same JSON shape."""
    assert isinstance(exc, HTTPException)
    kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    body = {"type": kind, "error": _ERROR_NAMES.get(exc.status_code, "HTTPError")}
    body["message"] = str(exc.detail)
    return JSONResponse(body, exc.status_code, headers=exc.headers)


async def server_error(request: Request, exc: Exception) -> JSONResponse:
    # The message of an unexpected error may hold inputs or secrets: the log has the details.
    body = {"type": "internal_error", "error": "InternalError", "message": "internal error"}
    return JSONResponse(body, 500)


__all__ = [
    "HTTPError",
    "error_body",
    "error_item",
    "error_response",
    "http_exception",
    "invalid",
    "server_error",
]
