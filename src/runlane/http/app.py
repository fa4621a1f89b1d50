"""The JSON API over an engine, and a small auto-refreshing dashboard at ``/``.

A refused start is an HTTP answer, not a crash: quota and singleton backlog refusals become 429
with the key and limit in the body, so a caller can back off on exactly the key that is full.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from ..engine import Engine
from ..errors import (
    ConcurrencyLimitError,
    DefinitionError,
    RunExistsError,
    RunFinishedError,
    RunlaneError,
    RunNotFoundError,
    SerializationError,
    SingletonQueueFullError,
    StoreUnavailableError,
    UnknownWorkflowError,
)
from .shapes import run_to_dict, step_to_dict

DASHBOARD = Path(__file__).with_name("templates") / "dashboard.html"


class HTTPError(Exception):
    def __init__(self, status: int, error: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": error, "message": message, **extra}


def error_response(exc: Exception) -> JSONResponse:
    """The HTTP answer for an exception raised by the engine or by request parsing."""
    if isinstance(exc, HTTPError):
        return JSONResponse(exc.body, exc.status)
    status, extra = _status_for(exc)
    body = {"error": type(exc).__name__, "message": str(exc), **extra}
    headers = {"Retry-After": "1"} if status in (429, 503) else None
    return JSONResponse(body, status, headers=headers)


def _status_for(exc: Exception) -> tuple[int, dict[str, Any]]:
    if isinstance(exc, ConcurrencyLimitError):
        return 429, {
            "workflow": exc.workflow,
            "key": exc.key,
            "limit": exc.limit,
            "active": exc.active,
        }
    if isinstance(exc, SingletonQueueFullError):
        return 429, {
            "workflow": exc.workflow,
            "key": exc.key,
            "max_queue_depth": exc.max_queue_depth,
        }
    if isinstance(exc, StoreUnavailableError):
        return 503, {}
    if isinstance(exc, UnknownWorkflowError | RunNotFoundError):
        return 404, {}
    if isinstance(exc, RunExistsError | RunFinishedError):
        return 409, {"run_id": exc.run_id, "status": str(exc.status)}
    if isinstance(exc, SerializationError | DefinitionError | ValueError):
        return 400, {}
    return 409, {}


# ---------------------------------------------------------------- request helpers


async def read_json(request: Request) -> Any:
    """The request body as JSON; an empty body is ``None``."""
    raw = await request.body()
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise HTTPError(400, "BadRequest", f"request body is not valid JSON: {exc}") from None


def query_int(request: Request, name: str, default: int) -> int:
    value = request.query_params.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise HTTPError(400, "BadRequest", f"{name} must be an integer, got {value!r}") from None


Handler = Callable[[Request], Awaitable[Response]]


def guarded(handler: Handler) -> Handler:
    """Map runlane and request errors to JSON error responses."""

    async def wrapper(request: Request) -> Response:
        try:
            return await handler(request)
        except (HTTPError, RunlaneError, ValueError) as exc:
            return error_response(exc)

    return wrapper


# ---------------------------------------------------------------- the app


class Api:
    """The endpoints, bound to one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def start(self, request: Request) -> Response:
        body = await read_json(request)
        if not isinstance(body, dict) or not isinstance(body.get("workflow"), str):
            raise HTTPError(400, "BadRequest", 'body must be an object with a "workflow" name')
        tags = body.get("tags") or ()
        if not isinstance(tags, list | tuple):
            raise HTTPError(400, "BadRequest", "tags must be a list of strings")
        run = await self.engine.start(
            body["workflow"],
            body.get("input"),
            body.get("run_id"),
            priority=int(body.get("priority") or 0),
            tags=tags,
        )
        return JSONResponse(run_to_dict(run), 201)

    async def list(self, request: Request) -> Response:
        params = request.query_params
        found = await self.engine.list_runs(
            workflow=params.get("workflow") or None,
            status=params.get("status") or None,
            tag=params.get("tag") or None,
            limit=query_int(request, "limit", 100),
            offset=query_int(request, "offset", 0),
        )
        return JSONResponse({"runs": [run_to_dict(r) for r in found]})

    async def show(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        run = await self.engine.get_run(run_id)
        if run is None:
            raise RunNotFoundError(run_id)
        steps = await self.engine.list_steps(run_id)
        return JSONResponse({**run_to_dict(run), "steps": [step_to_dict(s) for s in steps]})

    async def cancel(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        if await self.engine.get_run(run_id) is None:
            raise RunNotFoundError(run_id)
        return JSONResponse({"run_id": run_id, "cancelled": await self.engine.cancel(run_id)})

    async def retry(self, request: Request) -> Response:
        run = await self.engine.requeue(request.path_params["run_id"])
        return JSONResponse(run_to_dict(run))

    async def signal(self, request: Request) -> Response:
        run_id, name = request.path_params["run_id"], request.path_params["name"]
        await self.engine.signal(run_id, name, await read_json(request))
        return JSONResponse({"run_id": run_id, "signal": name, "delivered": True}, 202)

    async def event(self, request: Request) -> Response:
        name = request.path_params["name"]
        touched = await self.engine.publish_event(
            name, await read_json(request), id=request.query_params.get("id")
        )
        return JSONResponse({"event": name, "touched": touched}, 202)

    async def dashboard(self, request: Request) -> Response:
        return HTMLResponse(DASHBOARD.read_text(encoding="utf-8"))


def create_app(engine: Engine, *, manage_engine: bool = True) -> Starlette:
    """A Starlette app serving ``engine``; with ``manage_engine`` its lifespan runs the engine."""
    api = Api(engine)
    routes = [
        Route("/", api.dashboard, methods=["GET"]),
        Route("/runs", guarded(api.start), methods=["POST"]),
        Route("/runs", guarded(api.list), methods=["GET"]),
        Route("/runs/{run_id}", guarded(api.show), methods=["GET"]),
        Route("/runs/{run_id}/cancel", guarded(api.cancel), methods=["POST"]),
        Route("/runs/{run_id}/retry", guarded(api.retry), methods=["POST"]),
        Route("/runs/{run_id}/signal/{name}", guarded(api.signal), methods=["POST"]),
        Route("/events/{name}", guarded(api.event), methods=["POST"]),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if not manage_engine:
            yield
            return
        async with engine:
            yield

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.engine = engine
    return app
