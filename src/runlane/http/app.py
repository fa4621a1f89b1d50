"""The JSON API over an engine, its OpenAPI document, and the dashboard's pages.

A refused start is an HTTP answer, not a crash: quota, singleton backlog and rate limit refusals
become 429 with the key and limit in the body, so a caller can back off on exactly the key that
is full.
Every error is JSON with a ``type`` (see :mod:`runlane.http.errors`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from ..audit import OK, record
from ..engine import Engine
from ..errors import RunExistsError, RunlaneError, RunNotFoundError
from ..lanes import AllLanes, all_lanes, lanes_of_run
from ..models import Run, RunCursor, RunQuery, RunStatus
from ..presence import unserved
from ..schedules import ScheduleState
from ..serialization import normalise
from ..starts import Start, StartOutcome
from .auth import READ_METHODS, TokenAuth, api_tokens, forbidden, principal_of, wants_html
from .console import engine_view, heard_workers, overview
from .errors import HTTPError, error_item, error_response, http_exception, server_error
from .metrics import Metrics
from .openapi import openapi
from .params import (
    DEFAULT_PAGE,
    MAX_PAGE,
    MAX_UPDATE_TIMEOUT,
    UPDATE_TIMEOUT,
    ForkRequest,
    StartRequest,
    audit_cursor,
    encode_cursor,
    parse_batch,
    query_int,
    query_seconds,
    read_json,
    read_payload,
    run_query,
)
from .sampler import INTERVAL as SAMPLE_EVERY
from .sampler import LaneSampler
from .shapes import (
    audit_to_dict,
    engine_to_dict,
    jsonable,
    lanes_to_dict,
    run_summary,
    run_to_dict,
    schedule_to_dict,
    step_to_dict,
    unserved_to_list,
)
from .waiting import waiting_for

HERE = Path(__file__).parent
PAGES = HERE / "templates"
MAX_CHILDREN = 100  # children listed in a run's detail, newest first
CONSOLE_PAGES = (
    "/",
    "/ui/runs",
    "/ui/runs/{run_id}",
    "/ui/lanes",
    "/ui/schedules",
    "/ui/engines",
)

Handler = Callable[[Request], Awaitable[Response]]


# An answer of the API is never stored by a browser, and says that it depends on Accept: a
# run's address answers a browser with its page and a script with its JSON, and a cached page
# must never answer the page's own request for the JSON (or the other way round).
UNCACHED = {"Cache-Control": "no-store", "Vary": "Accept"}


def guarded(handler: Handler) -> Handler:
    """Map runlane and request errors to JSON error responses; nothing is cached."""

    async def wrapper(request: Request) -> Response:
        try:
            response = await handler(request)
        except (HTTPError, RunlaneError, ValueError) as exc:
            response = error_response(exc)
        response.headers.update(UNCACHED)
        return response

    return wrapper


def page(name: str) -> Handler:
    async def serve(request: Request) -> Response:
        # Revalidated at each visit: an upgrade's new page is seen at once.
        headers = {"Cache-Control": "no-cache"}
        return FileResponse(PAGES / name, media_type="text/html", headers=headers)

    return serve


def _started(
    run: Run, *, created: bool = False, input_differs: bool = False, debounced: bool = False
) -> dict[str, Any]:
    flags = {"created": created, "input_differs": input_differs, "debounced": debounced}
    return {**run_to_dict(run), **flags}


def _start_of(wanted: StartRequest) -> Start:
    """The engine's start of a request: its run id named here, and if_exists "fail" (see
    ``Api._answer``)."""
    return Start(
        wanted.workflow,
        normalise(wanted.input, "input"),
        wanted.run_id or uuid.uuid4().hex,
        priority=wanted.priority,
        tags=wanted.tags,
        if_exists="fail",
        version=wanted.version,
        execution_timeout=wanted.execution_timeout,
        attributes=wanted.attributes,
    )


class Api:
    """The endpoints, bound to one engine."""

    def __init__(self, engine: Engine, sample_every: float = SAMPLE_EVERY) -> None:
        self.engine = engine
        self.prometheus = Metrics(engine)
        self.sampler = LaneSampler(engine, sample_every)
        self.started_at = engine.now()

    async def _get_run(self, run_id: str) -> Run | None:
        """A run as the API shows it: a payload this server cannot decode left encoded."""
        return await self.engine.read(lambda store: store.get_run(run_id))

    async def start(self, request: Request) -> Response:
        wanted = StartRequest.parse(await read_json(request))
        start = _start_of(wanted)
        [outcome] = await self.engine.start_many([start])
        status, body = await self._answer(wanted, start, outcome)
        return JSONResponse(body, status)

    async def start_batch(self, request: Request) -> Response:
        """Many starts in one store call, each answered as ``POST /runs`` would answer it."""
        wanted = parse_batch(await read_json(request))
        starts = [_start_of(w) for w in wanted]
        outcomes = await self.engine.start_many(starts)
        answers = []
        for one, start, outcome in zip(wanted, starts, outcomes, strict=True):
            try:
                status, body = await self._answer(one, start, outcome)
                answers.append({"status": status, "run": body})
            except (RunlaneError, ValueError) as exc:
                answers.append(error_item(exc))
        return JSONResponse({"runs": answers})

    async def _answer(
        self, wanted: StartRequest, start: Start, outcome: StartOutcome
    ) -> tuple[int, Any]:
        """A start's status and body: 201 new, 200 existing (or the debounced run it folded
        into); a refusal is raised."""
        # Every start is made with if_exists="fail": the refusal tells an existing run from a
        # new one (a start that folded into a debounced run is told by the id returned).
        if isinstance(outcome.error, RunExistsError) and wanted.if_exists == "return":
            existing = await self._get_run(outcome.error.run_id)
            if existing is None:  # pragma: no cover - a run is never deleted under a start
                raise outcome.error
            return 200, _started(existing, input_differs=existing.input != start.input)
        run = outcome.result()
        if run.id != start.run_id:
            return 200, _started(run, debounced=True)
        return 201, _started(run, created=True)

    async def list_runs(self, request: Request) -> Response:
        query = run_query(request)
        limit = query_int(request, "limit", DEFAULT_PAGE, 1, MAX_PAGE)
        run_id = request.query_params.get("id")
        if run_id:
            return await self._run_by_id(run_id, query)
        # One more than asked: whether a next page exists, without a count.
        found = await self.engine.read(lambda store: store.page_runs(query, limit + 1))
        shown, more = found[:limit], len(found) > limit
        last = shown[-1] if more else None
        cursor = encode_cursor(RunCursor(last.created_at, last.id)) if last else None
        return JSONResponse({"runs": [run_to_dict(r) for r in shown], "next_cursor": cursor})

    async def _run_by_id(self, run_id: str, query: RunQuery) -> Response:
        """An id names one run: looked up as it is (the other filters must match too)."""
        run = await self._get_run(run_id)
        shown = [run] if run is not None and query.matches(run) else []
        return JSONResponse({"runs": [run_to_dict(r) for r in shown], "next_cursor": None})

    async def counts(self, request: Request) -> Response:
        query = run_query(request, cursor=False)
        counts = await self.engine.read(lambda store: store.count_runs(query))
        by_status = {str(status): n for status, n in sorted(counts.items())}
        return JSONResponse({"counts": by_status, "total": sum(counts.values())})

    async def show(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        if wants_html(request):
            # The page lives at an address of its own, so its JSON's address holds only JSON.
            return RedirectResponse(f"/ui/runs/{quote(run_id, safe='')}", 303)
        run = await self._get_run(run_id)
        if run is None:
            raise RunNotFoundError(run_id)
        steps = await self.engine.read(lambda store: store.list_steps(run_id))
        children = await self.engine.read(
            lambda store: store.list_runs(parent_id=run_id, limit=MAX_CHILDREN)
        )
        now = self.engine.now()
        # Only a blocked run's wait needs the lanes (its place in line).
        lanes = None
        if run.status == RunStatus.BLOCKED:
            lanes = await self.engine.read(lambda store: lanes_of_run(store, run, now))
        return JSONResponse(
            {
                **run_to_dict(run),
                "steps": [{**step_to_dict(s), "wake_at": jsonable(s.wake_at)} for s in steps],
                "children": [run_summary(c) for c in children],
                "waiting_for": waiting_for(
                    run, steps, lanes, self.engine.registry, now, await self._served(run)
                ),
            }
        )

    async def _served(self, run: Run) -> set[tuple[str, str]]:
        """What the live engines serve (read only for an active run: a settled one waits for
        nothing)."""
        if run.is_terminal:
            return set()
        engines = await self.engine.list_engines()
        return {pair for e in engines if e.alive for pair in e.serves}

    async def _lanes(self, now: datetime) -> AllLanes:
        found = await self.engine.read(lambda store: all_lanes(store, now))
        self.sampler.note(found, now)
        return found

    async def cancel(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        if await self._get_run(run_id) is None:
            raise RunNotFoundError(run_id)
        return JSONResponse({"run_id": run_id, "cancelled": await self.engine.cancel(run_id)})

    async def pause(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        return JSONResponse({"run_id": run_id, "paused": await self.engine.pause(run_id)})

    async def resume(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        return JSONResponse({"run_id": run_id, "resumed": await self.engine.resume(run_id)})

    async def fork(self, request: Request) -> Response:
        wanted = ForkRequest.parse(await read_json(request))
        value = None if wanted.input is None else normalise(wanted.input, "input")
        # A fork asked again by its id answers the fork (200), as a start does.
        known = wanted.run_id is not None and await self._get_run(wanted.run_id) is not None
        run = await self.engine.fork(
            request.path_params["run_id"],
            from_seq=wanted.from_seq,
            run_id=wanted.run_id,
            input=value,
            version=wanted.version,
        )
        return JSONResponse(run_to_dict(run), 200 if known else 201)

    async def retry(self, request: Request) -> Response:
        run = await self.engine.requeue(request.path_params["run_id"])
        return JSONResponse(run_to_dict(run))

    async def signal(self, request: Request) -> Response:
        run_id, name = request.path_params["run_id"], request.path_params["name"]
        await self.engine.signal(run_id, name, await read_json(request))
        return JSONResponse({"run_id": run_id, "signal": name, "delivered": True}, 202)

    async def update(self, request: Request) -> Response:
        run_id, name = request.path_params["run_id"], request.path_params["name"]
        timeout = query_seconds(request, "timeout", UPDATE_TIMEOUT, MAX_UPDATE_TIMEOUT)
        payload = await read_payload(request)
        try:
            reply = await self.engine.update(run_id, name, payload, timeout=timeout)
        except TimeoutError as exc:
            raise HTTPError(504, "update_timeout", str(exc), run_id=run_id, name=name) from None
        return JSONResponse({"run_id": run_id, "update": name, "reply": reply})

    async def event(self, request: Request) -> Response:
        name = request.path_params["name"]
        touched = await self.engine.publish_event(
            name, await read_json(request), id=request.query_params.get("id") or None
        )
        return JSONResponse({"event": name, "touched": touched}, 202)

    async def lanes(self, request: Request) -> Response:
        key = request.query_params.get("key") or None
        now = self.engine.now()
        if key is None:
            return JSONResponse(lanes_to_dict(await self._lanes(now)))
        found = await self.engine.read(lambda store: all_lanes(store, now, key))
        return JSONResponse(lanes_to_dict(found))

    async def engines(self, request: Request) -> Response:
        engines = await self.engine.list_engines()
        active = await self.engine.read(lambda store: store.active_code_counts())
        return JSONResponse(
            {
                "engines": [engine_to_dict(e) for e in engines],
                "unserved": unserved_to_list(unserved(active, engines)),
            }
        )

    async def lanes_history(self, request: Request) -> Response:
        return JSONResponse(self.sampler.history())

    async def overview(self, request: Request) -> Response:
        return JSONResponse(await overview(self.engine, self.engine.now()))

    async def workers(self, request: Request) -> Response:
        body = {
            "engine": engine_view(self.engine, self.started_at),
            "workers": heard_workers(self.engine),
        }
        return JSONResponse(jsonable(body))

    async def schedules(self, request: Request) -> Response:
        found = await self.engine.schedules.list()
        now = self.engine.now()
        shown = [{**schedule_to_dict(s), "next_fires": next_fires(s, now)} for s in found]
        return JSONResponse({"schedules": shown})

    async def schedule_action(self, request: Request) -> Response:
        schedule_id, action = request.path_params["schedule_id"], request.path_params["action"]
        if action == "trigger":
            return JSONResponse(run_to_dict(await self.engine.schedules.trigger(schedule_id)), 201)
        if action == "pause":
            return JSONResponse(schedule_to_dict(await self.engine.schedules.pause(schedule_id)))
        if action == "resume":
            return JSONResponse(schedule_to_dict(await self.engine.schedules.resume(schedule_id)))
        raise HTTPError(404, "not_found", f"no action {action!r}: pause, resume or trigger")

    async def metrics(self, request: Request) -> Response:
        body, content_type = await self.prometheus.text()
        return Response(body, media_type=content_type)

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"ok": True})

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(openapi())

    async def whoami(self, request: Request) -> Response:
        """The caller's token: its name and scope (the console disables what it may not do)."""
        principal = principal_of(request)
        return JSONResponse({"name": principal.name, "scope": principal.scope})

    async def audit(self, request: Request) -> Response:
        limit = query_int(request, "limit", DEFAULT_PAGE, 1, MAX_PAGE)
        before = audit_cursor(request.query_params.get("cursor"))
        found = await self.engine.read(lambda store: store.list_audit(limit + 1, before=before))
        shown, more = found[:limit], len(found) > limit
        cursor = str(shown[-1].id) if more else None
        return JSONResponse({"entries": [audit_to_dict(e) for e in shown], "next_cursor": cursor})

    def operated(self, action: str, handler: Handler) -> Handler:
        """``handler`` as an operator action: refused (403) to a token that may only read, and
        audited however it went."""
        answer = guarded(handler)

        async def operate(request: Request) -> Response:
            principal = principal_of(request)
            if principal.operates:
                response = await answer(request)
            else:
                response = error_response(forbidden(principal, request.method, request.url.path))
                response.headers.update(UNCACHED)
            await self._audited(request, principal.name, action, response)
            return response

        return operate

    async def _audited(self, request: Request, actor: str, action: str, response: Response) -> None:
        params = request.path_params
        body = _body_of(response)
        if action == "schedule":
            action = f"schedule.{params.get('action')}"
        run_id = params.get("run_id") or (body.get("id") if response.status_code < 300 else None)
        detail = params.get("name") or params.get("schedule_id")
        if action == "fork" and response.status_code < 300:
            detail = body.get("id")
        if action == "start_batch" and response.status_code < 300:
            detail = _batch_detail(body.get("runs", []))
        ok = response.status_code < 400
        outcome = OK if ok else f"{response.status_code} {body.get('type', 'error')}"
        await record(
            self.engine,
            actor=actor,
            source="http",
            action=action,
            outcome=outcome,
            run_id=run_id if isinstance(run_id, str) else None,
            detail=detail if isinstance(detail, str) else None,
        )


def _body_of(response: Response) -> dict[str, Any]:
    """A JSON answer's object (what the audit names a run or an error by), else nothing."""
    try:
        body = json.loads(bytes(response.body))
    except (ValueError, AttributeError):
        return {}
    return body if isinstance(body, dict) else {}


def _batch_detail(answers: list[dict[str, Any]]) -> str:
    """A batch's entry in the audit log: how many of its starts came to what."""
    statuses = Counter(answer.get("status") for answer in answers)
    created, existing = statuses.pop(201, 0), statuses.pop(200, 0)
    return (
        f"{len(answers)} starts: {created} created, {existing} existing, {statuses.total()} refused"
    )


NEXT_FIRES = 3


def next_fires(state: ScheduleState, now: datetime) -> list[str]:
    """The schedule's next windows from its next fire on (none while it is paused)."""
    if state.paused or state.next_fire_at is None:
        return []
    after = max(state.next_fire_at, now) - timedelta(microseconds=1)
    windows = itertools.islice(state.schedule.windows_after(after), NEXT_FIRES)
    return [jsonable(window) for window in windows]


OPERATIONS: dict[str, str] = {
    "/runs": "start",
    "/runs:batch": "start_batch",
    "/runs/{run_id}/cancel": "cancel",
    "/runs/{run_id}/retry": "retry",
    "/runs/{run_id}/pause": "pause",
    "/runs/{run_id}/resume": "resume",
    "/runs/{run_id}/fork": "fork",
    "/runs/{run_id}/signal/{name}": "signal",
    "/runs/{run_id}/updates/{name}": "update",
    "/events/{name}": "publish_event",
    "/schedules/{schedule_id}/{action}": "schedule",
}
"""The action each operator route takes, as the audit log names it (a schedule's:
``schedule.pause``, ``schedule.resume``, ``schedule.trigger``)."""


def routes(api: Api) -> list[BaseRoute]:
    json_routes: list[tuple[str, Handler, str]] = [
        ("/healthz", api.healthz, "GET"),
        ("/metrics", api.metrics, "GET"),
        ("/openapi.json", api.openapi, "GET"),
        ("/whoami", api.whoami, "GET"),
        ("/audit", api.audit, "GET"),
        ("/runs", api.start, "POST"),
        ("/runs:batch", api.start_batch, "POST"),
        ("/runs", api.list_runs, "GET"),
        ("/stats/runs", api.counts, "GET"),
        ("/runs/{run_id}", api.show, "GET"),
        ("/runs/{run_id}/cancel", api.cancel, "POST"),
        ("/runs/{run_id}/retry", api.retry, "POST"),
        ("/runs/{run_id}/pause", api.pause, "POST"),
        ("/runs/{run_id}/resume", api.resume, "POST"),
        ("/runs/{run_id}/fork", api.fork, "POST"),
        ("/runs/{run_id}/signal/{name}", api.signal, "POST"),
        ("/runs/{run_id}/updates/{name}", api.update, "POST"),
        ("/events/{name}", api.event, "POST"),
        ("/lanes", api.lanes, "GET"),
        ("/engines", api.engines, "GET"),
        ("/lanes/history", api.lanes_history, "GET"),
        ("/overview", api.overview, "GET"),
        ("/workers", api.workers, "GET"),
        ("/schedules", api.schedules, "GET"),
        ("/schedules/{schedule_id}/{action}", api.schedule_action, "POST"),
    ]
    # One page shell for the console: its script draws the page the address names.
    console = page("console.html")
    pages: list[BaseRoute] = [
        *(Route(path, console, methods=["GET"]) for path in CONSOLE_PAGES),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    api_routes: list[BaseRoute] = [
        Route(p, guarded(h) if m in READ_METHODS else api.operated(OPERATIONS[p], h), methods=[m])
        for p, h, m in json_routes
    ]
    return api_routes + pages


def create_app(
    engine: Engine,
    *,
    manage_engine: bool = True,
    token: str | None = None,
    tokens: str | None = None,
    sample_every: float = SAMPLE_EVERY,
) -> Starlette:
    """A Starlette app serving ``engine``; with ``manage_engine`` its lifespan runs the engine.

    ``tokens`` (default ``$RUNLANE_API_TOKENS``), ``name:scope:token,...``, and ``token``
    (default ``$RUNLANE_API_TOKEN``, scope ``operate``): with any, every request but
    ``GET /healthz`` and the console's pages needs ``Authorization: Bearer <token>``, and a
    ``read`` token may only ``GET`` (see ``runlane.http.auth``). Every request of another
    method is audited (``GET /audit``). ``sample_every``: seconds between two samples of the
    lanes for the console's charts (``GET /lanes/history``).
    """

    api = Api(engine, sample_every)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            if manage_engine:
                await stack.enter_async_context(engine)
            api.sampler.start()
            stack.push_async_callback(api.sampler.stop)
            yield

    accepted = api_tokens(token, tokens)
    middleware = [Middleware(TokenAuth, tokens=accepted)] if accepted else []
    handlers: dict[Any, Any] = {HTTPException: http_exception, Exception: server_error}
    app = Starlette(
        routes=routes(api),
        middleware=middleware,
        exception_handlers=handlers,
        lifespan=lifespan,
    )
    app.state.engine = engine
    return app
