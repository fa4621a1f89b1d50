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
CHECKS = (
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
)


@schema.parametrize()  # type: ignore[untyped-decorator]
@settings(
    max_examples=30,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_the_api_answers_every_request_as_documented(case: Any) -> None:
    response = case.call()
    case.validate_response(response, checks=CHECKS)
    if response.status_code >= 400:
        body = response.json()
        assert isinstance(body.get("type"), str) and body["type"], body
