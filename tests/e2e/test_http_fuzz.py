"""The HTTP API fuzzed against its own OpenAPI document (schemathesis): whatever a client sends,
no 500, every answer as documented, every error a JSON body with a ``type``."""

from __future__ import annotations

from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

import runlane  # noqa: E402
from runlane.http import create_app  # noqa: E402
from runlane.stores import MemoryStore  # noqa: E402


@runlane.workflow(name="echo")
async def echo(ctx: runlane.Context, input: Any) -> Any:
    return input


@runlane.workflow(name="keyed", concurrency=runlane.Concurrency(key=lambda i: "one", limit=1))
async def keyed(ctx: runlane.Context, input: Any) -> Any:
    return input


ENGINE = runlane.Engine(
    "memory://",
    workflows=[echo, keyed],
    drive=False,
    schedules=[runlane.Schedule("hourly", "echo", every=3600)],
)
schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(ENGINE, manage_engine=False))
FUZZED = settings(
    max_examples=30,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
CHECKS = (
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
)


@schema.parametrize()  # type: ignore[untyped-decorator]
@FUZZED
def test_the_api_answers_every_request_as_documented(case: Any) -> None:
    response = case.call()
    case.validate_response(response, checks=CHECKS)
    if response.status_code >= 400:
        body = response.json()
        assert isinstance(body.get("type"), str) and body["type"], body


# ---------------------------------------------------------------- a read token, on every route

READER = {"Authorization": "Bearer fuzz-reader"}
SCOPED = runlane.Engine(
    "memory://",
    workflows=[echo, keyed],
    drive=False,
    schedules=[runlane.Schedule("hourly", "echo", every=3600)],
)
SCOPED_APP = create_app(
    SCOPED, manage_engine=False, tokens="reader:read:fuzz-reader,ops:operate:fuzz-ops"
)
scoped = schemathesis.openapi.from_asgi("/openapi.json", SCOPED_APP, headers=READER)


@scoped.parametrize()  # type: ignore[untyped-decorator]
@FUZZED
def test_a_read_token_never_operates_whatever_it_sends_to_any_route(case: Any) -> None:
    response = case.call(headers=READER)
    case.validate_response(response, checks=CHECKS)
    method = case.method.upper()
    if method in ("GET", "HEAD"):
        assert response.status_code != 403
        return
    assert response.status_code >= 400, (method, case.path, response.text)
    if method == case.operation.method.upper():  # a route's own method (not a made-up one)
        # Refused for its scope, or (a case sent without the token) for having none.
        assert response.status_code in (401, 403), (method, case.path, response.text)
    # Nothing was done: no run, no fired schedule; the attempt is in the audit log.
    store = SCOPED.store
    assert isinstance(store, MemoryStore) and not store._runs
    assert all(e.outcome == "403 forbidden" for e in store._audit)


async def test_every_route_but_a_get_is_refused_to_a_read_token() -> None:
    """The fuzzing above covers what the document lists; this, every route the app has."""
    import httpx
    from starlette.routing import Route

    operated = [
        (route.path, method)
        for route in SCOPED_APP.routes
        if isinstance(route, Route)
        for method in sorted(route.methods or ())
        if method not in ("GET", "HEAD")
    ]
    assert len(operated) == 11
    transport = httpx.ASGITransport(app=SCOPED_APP)
    async with httpx.AsyncClient(transport=transport, base_url="http://runlane") as client:
        for path, method in operated:
            url = path.replace("{run_id}", "r").replace("{name}", "n")
            url = url.replace("{schedule_id}", "hourly").replace("{action}", "trigger")
            answer = await client.request(method, url, headers=READER, json={"workflow": "echo"})
            assert answer.status_code == 403, (method, url, answer.text)
