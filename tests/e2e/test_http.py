"""The HTTP API over a real SQLite-backed engine, through httpx's ASGI transport."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import pytest

import runlane
from runlane.http import create_app
from runlane.http.openapi import openapi
from runlane.stores.sqlite import SqliteStore

from ..helpers import api_client


@runlane.workflow(name="approval")
async def approval(ctx: runlane.Context, input: dict[str, Any]) -> dict[str, Any]:
    decision = await ctx.wait_for_signal("approve")
    return {"item": input["item"], "decision": decision}


@runlane.workflow(
    name="report", concurrency=runlane.Concurrency(key=lambda i: f"tenant:{i['tenant']}", limit=2)
)
async def report(ctx: runlane.Context, input: dict[str, Any]) -> str:
    await ctx.wait_for_signal("done")
    return "ok"


@runlane.workflow(
    name="nightly",
    singleton=runlane.Singleton(key=lambda i: f"store:{i['store']}", max_queue_depth=0),
)
async def nightly(ctx: runlane.Context, input: dict[str, Any]) -> str:
    return "synced"


@runlane.workflow(
    name="alert",
    rate_limit=runlane.RateLimit(limit=1, period=90, key=lambda i: i["team"]),
)
async def alert(ctx: runlane.Context, input: dict[str, Any]) -> str:
    return "sent"


@runlane.workflow(name="refresh", debounce=runlane.Debounce(key=lambda i: i["page"], period=60))
async def refresh(ctx: runlane.Context, input: dict[str, Any]) -> Any:
    return input


@runlane.workflow(name="on-order", on_event=("order.placed",))
async def on_order(ctx: runlane.Context, input: dict[str, Any]) -> Any:
    return input


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[runlane.Engine]:
    engine = runlane.Engine(
        store=SqliteStore(tmp_path / "http.db"),
        workflows=[approval, report, nightly, alert, refresh, on_order],
        drive=False,
    )
    async with engine:
        yield engine


@pytest.fixture
async def client(engine: runlane.Engine) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(engine) as client:
        yield client


async def test_post_runs_creates_a_pending_run_with_utc_timestamps(
    client: httpx.AsyncClient,
) -> None:
    response = await client.post(
        "/runs",
        json={"workflow": "approval", "input": {"item": "x"}, "run_id": "a1", "tags": ["web"]},
    )
    assert response.status_code == 201
    body = response.json()
    assert (body["id"], body["status"], body["tags"]) == ("a1", "pending", ["web"])
    assert datetime.fromisoformat(body["created_at"]).utcoffset() is not None
    assert body["created_at"].endswith("+00:00")


async def test_signal_over_http_completes_a_waiting_run(
    client: httpx.AsyncClient, engine: runlane.Engine
) -> None:
    await client.post(
        "/runs", json={"workflow": "approval", "input": {"item": "x"}, "run_id": "a1"}
    )
    await engine.tick()
    waiting = (await client.get("/runs/a1")).json()
    assert waiting["status"] == "suspended"
    assert [(s["kind"], s["name"], s["status"]) for s in waiting["steps"]] == [
        ("signal", "approve", "pending")
    ]
    sent = await client.post("/runs/a1/signal/approve", json={"by": "ops"})
    assert sent.status_code == 202
    await engine.tick()
    done = (await client.get("/runs/a1")).json()
    assert done["status"] == "completed"
    assert done["output"] == {"item": "x", "decision": {"by": "ops"}}
    assert done["steps"][0]["finished_at"].endswith("+00:00")


@runlane.workflow(name="desk")
async def desk(ctx: runlane.Context, input: Any) -> None:
    while True:
        update = await ctx.wait_for_update("ask")
        if update.payload == "bad":
            await ctx.reply(update, error="a bad question")
        else:
            await ctx.reply(update, {"echo": update.payload})


@pytest.fixture
async def driven(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """A client of an engine that drives its runs (an update's request waits for the reply)."""
    store = SqliteStore(tmp_path / "driven.db")
    engine = runlane.Engine(store, workflows=[desk, approval], poll_interval=0.02)
    async with engine, api_client(engine) as client:
        yield client


def documented(path: str, status: int) -> Any:
    """A validator of the answers the OpenAPI document gives ``POST path`` for ``status``."""
    document = openapi()
    answer = document["paths"][path]["post"]["responses"][str(status)]
    schema = answer["content"]["application/json"]["schema"]
    return jsonschema_rs.validator_for({**schema, "components": document["components"]})


async def test_an_update_over_http_answers_the_workflows_reply(
    driven: httpx.AsyncClient,
) -> None:
    await driven.post("/runs", json={"workflow": "desk", "run_id": "d1"})
    path = "/runs/{run_id}/updates/{name}"
    answered = await driven.post("/runs/d1/updates/ask?timeout=10", json={"payload": "hi"})
    assert answered.status_code == 200
    assert answered.json() == {"run_id": "d1", "update": "ask", "reply": {"echo": "hi"}}
    documented(path, 200).validate(answered.json())
    empty = await driven.post("/runs/d1/updates/ask")  # no body: no payload
    assert empty.json()["reply"] == {"echo": None}
    rejected = await driven.post("/runs/d1/updates/ask", json={"payload": "bad"})
    assert rejected.status_code == 409
    assert rejected.json() == {
        "type": "update_rejected",
        "error": "UpdateRejectedError",
        "message": "a bad question",
        "run_id": "d1",
        "name": "ask",
    }
    documented(path, 409).validate(rejected.json())


async def test_an_unanswered_update_over_http_is_a_504_and_bad_ones_are_client_errors(
    driven: httpx.AsyncClient,
) -> None:
    await driven.post("/runs", json={"workflow": "approval", "input": {"item": "x"}, "run_id": "a"})
    late = await driven.post("/runs/a/updates/ask?timeout=0.2", json={"payload": 1})
    assert late.status_code == 504
    assert late.json()["type"] == "update_timeout" and "stays delivered" in late.json()["message"]
    documented("/runs/{run_id}/updates/{name}", 504).validate(late.json())
    assert (await driven.post("/runs/missing/updates/ask")).status_code == 404
    for query in ("timeout=0", "timeout=-1", "timeout=soon", "timeout=601"):
        bad = await driven.post(f"/runs/a/updates/ask?{query}")
        assert (bad.status_code, bad.json()["type"]) == (422, "invalid_request"), query
    for body in ([1], {"payload": 1, "more": 2}, "text"):
        bad = await driven.post("/runs/a/updates/ask", json=body)
        assert bad.status_code == 422, body
    reserved = await driven.post("/runs/a/signal/$update:ask")
    assert (reserved.status_code, reserved.json()["type"]) == (422, "invalid_input")
    await driven.post("/runs/a/cancel")
    finished = await driven.post("/runs/a/updates/ask")
    assert (finished.status_code, finished.json()["type"]) == (409, "update_rejected")


async def test_list_runs_filters_by_status_workflow_and_tag(
    client: httpx.AsyncClient, engine: runlane.Engine
) -> None:
    await engine.start("approval", {"item": "x"}, "a1", tags=["vip"])
    await engine.start("nightly", {"store": "n"}, "n1")
    await engine.run_pending()
    assert [r["id"] for r in (await client.get("/runs?status=completed")).json()["runs"]] == ["n1"]
    assert [r["id"] for r in (await client.get("/runs?workflow=approval")).json()["runs"]] == ["a1"]
    assert [r["id"] for r in (await client.get("/runs?tag=vip")).json()["runs"]] == ["a1"]
    assert len((await client.get("/runs?limit=1")).json()["runs"]) == 1
    assert (await client.get("/runs?limit=many")).status_code == 422
    bogus = await client.get("/runs?status=bogus")
    assert bogus.status_code == 422
    assert (bogus.json()["type"], bogus.json()["field"]) == ("invalid_request", "status")
    assert "pending, running" in bogus.json()["message"]


async def test_runs_are_started_with_attributes_and_filtered_by_them(
    client: httpx.AsyncClient, engine: runlane.Engine
) -> None:
    for run_id, attributes in {
        "a1": {"customer": "acme", "tier": 2},
        "a2": {"customer": "acme", "tier": "2"},
        "a3": {"customer": "Acme Corp", "vip": True},
        "a4": {"customer": "globex", "tier": 2.5},
    }.items():
        body = {"workflow": "approval", "input": {"item": run_id}, "run_id": run_id}
        started = await client.post("/runs", json={**body, "attributes": attributes})
        assert started.status_code == 201 and started.json()["attributes"] == attributes

    async def ids(query: str) -> list[str]:
        response = await client.get(f"/runs?{query}")
        assert response.status_code == 200, response.json()
        return [r["id"] for r in response.json()["runs"]]

    assert await ids("attr.customer=acme") == ["a2", "a1"]
    assert await ids("attr.customer=acme&attr.tier=2") == ["a1"]  # a JSON number
    assert await ids('attr.tier="2"') == ["a2"]  # a JSON string
    assert await ids("attr.tier=2.5&workflow=approval") == ["a4"]
    assert await ids("attr.vip=true") == ["a3"]
    assert await ids("attr.customer=Acme%20Corp") == ["a3"]
    assert await ids("attr.customer=acme&limit=1") == ["a2"]
    assert await ids("attr.customer=nobody") == []
    assert await ids("id=a1&attr.tier=2") == ["a1"]
    assert await ids("id=a1&attr.tier=3") == []
    counts = (await client.get("/stats/runs?attr.customer=acme")).json()
    assert counts == {"counts": {"pending": 2}, "total": 2}
    shown = (await client.get("/runs/a3")).json()
    assert shown["attributes"] == {"customer": "Acme Corp", "vip": True}
    page = (await client.get("/runs?attr.customer=acme&limit=1")).json()
    rest = await client.get(f"/runs?attr.customer=acme&cursor={page['next_cursor']}")
    assert [r["id"] for r in rest.json()["runs"]] == ["a1"]


@pytest.mark.parametrize(
    "query", ["attr.=acme", "attr.n=1e400", "attr.n=99999999999999999999", "attr.k=%22a%5Cu0000%22"]
)
async def test_a_bad_attribute_filter_is_a_422_naming_its_parameter(
    client: httpx.AsyncClient, query: str
) -> None:
    for path in ("/runs", "/stats/runs"):
        response = await client.get(f"{path}?{query}")
        assert response.status_code == 422, response.json()
        assert response.json()["field"] == query.split("=")[0]


async def test_a_start_over_the_quota_is_answered_429_with_the_key_and_limit(
    client: httpx.AsyncClient,
) -> None:
    for n in (1, 2):
        ok = await client.post("/runs", json={"workflow": "report", "input": {"tenant": "acme"}})
        assert ok.status_code == 201, n
    refused = await client.post("/runs", json={"workflow": "report", "input": {"tenant": "acme"}})
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "1"
    body = refused.json()
    assert body["error"] == "ConcurrencyLimitError"
    assert (body["key"], body["limit"], body["active"]) == ("tenant:acme", 2, 2)
    other = await client.post("/runs", json={"workflow": "report", "input": {"tenant": "globex"}})
    assert other.status_code == 201


async def test_a_full_singleton_backlog_is_answered_429(client: httpx.AsyncClient) -> None:
    first = await client.post("/runs", json={"workflow": "nightly", "input": {"store": "n"}})
    assert first.status_code == 201
    refused = await client.post("/runs", json={"workflow": "nightly", "input": {"store": "n"}})
    assert refused.status_code == 429
    body = refused.json()
    assert (body["error"], body["key"], body["max_queue_depth"]) == (
        "SingletonQueueFullError",
        "store:n",
        0,
    )


async def test_a_start_over_the_rate_limit_is_answered_429_with_when_to_retry(
    client: httpx.AsyncClient,
) -> None:
    body = {"workflow": "alert", "input": {"team": "ops"}}
    assert (await client.post("/runs", json=body)).status_code == 201
    refused = await client.post("/runs", json=body)
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "90"  # whole seconds, rounded up
    error = refused.json()
    assert (error["type"], error["error"], error["key"]) == ("rate_limit", "RateLimitError", "ops")
    assert (error["limit"], error["period"]) == (1, 90.0) and 89 < error["retry_after"] <= 90
    other = {"workflow": "alert", "input": {"team": "dev"}}
    assert (await client.post("/runs", json=other)).status_code == 201


async def test_a_start_that_folds_into_a_debounced_run_answers_that_run(
    client: httpx.AsyncClient,
) -> None:
    first = await client.post("/runs", json={"workflow": "refresh", "input": {"page": "home"}})
    assert first.status_code == 201 and first.json()["status"] == "blocked"
    again = {"workflow": "refresh", "input": {"page": "home", "v": 2}, "run_id": "mine"}
    folded = await client.post("/runs", json=again)
    assert folded.status_code == 200
    body = folded.json()
    assert (body["id"], body["input"]) == (first.json()["id"], {"page": "home", "v": 2})
    assert (body["created"], body["debounced"], body["input_differs"]) == (False, True, False)


async def test_a_key_function_that_raises_on_the_input_is_a_422_naming_workflow_and_error(
    client: httpx.AsyncClient,
) -> None:
    refused = await client.post("/runs", json={"workflow": "nightly", "input": {"shop": "n"}})
    assert refused.status_code == 422
    body = refused.json()
    assert (body["type"], body["error"]) == ("invalid_input", "KeyFunctionError")
    assert (body["workflow"], body["gate"]) == ("nightly", "singleton")
    assert body["reason"] == "KeyError: 'store'"
    assert "nightly" in body["message"] and "KeyError" in body["message"]
    assert (await client.get("/runs")).json()["runs"] == []


@pytest.mark.parametrize(
    ("body", "status", "kind"),
    [
        ({"workflow": "nope"}, 404, "unknown_workflow"),
        ({"input": {}}, 422, "invalid_request"),
        ({"workflow": "approval", "tags": ["runlane:holder"]}, 422, "invalid_input"),
        ({"workflow": "approval", "tags": "web"}, 422, "invalid_request"),
        ({"workflow": "approval", "priority": "high"}, 422, "invalid_request"),
        ({"workflow": "approval", "priority": True}, 422, "invalid_request"),
        ({"workflow": "approval", "run_id": ""}, 422, "invalid_request"),
        ({"workflow": "approval", "if_exists": "replace"}, 422, "invalid_request"),
        ({"workflow": "approval", "inptu": {}}, 422, "invalid_request"),
        ({"workflow": "approval", "attributes": ["customer", "acme"]}, 422, "invalid_request"),
        ({"workflow": "approval", "attributes": {"tags": ["a"]}}, 422, "invalid_request"),
        ({"workflow": "approval", "attributes": {"": "x"}}, 422, "invalid_request"),
        (["approval"], 422, "invalid_request"),
    ],
)
async def test_bad_starts_are_typed_client_errors(
    client: httpx.AsyncClient, body: Any, status: int, kind: str
) -> None:
    response = await client.post("/runs", json=body)
    assert response.status_code == status
    assert response.json()["type"] == kind
    assert response.json()["message"]


async def test_a_body_that_is_not_json_is_a_400(client: httpx.AsyncClient) -> None:
    response = await client.post("/runs", content=b"{not json")
    assert response.status_code == 400
    assert response.json()["type"] == "invalid_json"
    assert "not valid JSON" in response.json()["message"]


async def test_unknown_and_finished_runs(client: httpx.AsyncClient, engine: runlane.Engine) -> None:
    assert (await client.get("/runs/missing")).status_code == 404
    assert (await client.post("/runs/missing/cancel")).status_code == 404
    assert (await client.post("/runs/missing/signal/approve")).status_code == 404
    await engine.start("nightly", {"store": "n"}, "n1")
    await engine.run_pending()
    late = await client.post("/runs/n1/signal/approve")
    assert late.status_code == 409
    assert late.json()["status"] == "completed"


async def test_pause_and_resume_over_http(
    client: httpx.AsyncClient, engine: runlane.Engine
) -> None:
    await engine.start("approval", {"item": "x"}, "a1")
    paused = await client.post("/runs/a1/pause")
    assert paused.status_code == 200 and paused.json() == {"run_id": "a1", "paused": True}
    documented("/runs/{run_id}/pause", 200).validate(paused.json())
    assert (await client.get("/runs/a1")).json()["status"] == "paused"
    assert (await client.post("/runs/a1/pause")).json()["paused"] is False
    resumed = await client.post("/runs/a1/resume")
    assert resumed.json() == {"run_id": "a1", "resumed": True}
    documented("/runs/{run_id}/resume", 200).validate(resumed.json())
    assert (await client.post("/runs/a1/resume")).json()["resumed"] is False
    for action in ("pause", "resume"):
        missing = await client.post(f"/runs/missing/{action}")
        assert missing.status_code == 404 and missing.json()["type"] == "run_not_found"


async def test_fork_over_http(client: httpx.AsyncClient, engine: runlane.Engine) -> None:
    await engine.start("approval", {"item": "x"}, "a1")
    await engine.run_pending()  # it waits for its signal (seq 1)
    forked = await client.post("/runs/a1/fork")
    assert forked.status_code == 201, forked.text
    documented("/runs/{run_id}/fork", 201).validate(forked.json())
    assert forked.json()["id"] == "a1.fork.1" and forked.json()["forked_from"] == ["a1", 1]
    body = {"run_id": "copy", "from_seq": 1, "input": {"item": "y"}}
    created = await client.post("/runs/a1/fork", json=body)
    assert created.status_code == 201 and created.json()["input"] == {"item": "y"}
    again = await client.post("/runs/a1/fork", json=body)
    assert again.status_code == 200 and again.json()["id"] == "copy"
    assert (await client.post("/runs/missing/fork")).status_code == 404
    for bad in ({"from_seq": 0}, {"from_seq": "1"}, {"run_id": ""}, {"nope": 1}, [1]):
        refused = await client.post("/runs/a1/fork", json=bad)
        assert refused.status_code == 422, (bad, refused.text)
    taken = await client.post("/runs/a1/fork", json={"run_id": "a1"})
    assert taken.status_code == 409 and taken.json()["type"] == "run_exists"


async def test_cancel_then_retry_puts_the_run_back_to_pending(
    client: httpx.AsyncClient, engine: runlane.Engine
) -> None:
    await engine.start("approval", {"item": "x"}, "a1")
    cancelled = await client.post("/runs/a1/cancel")
    assert cancelled.json() == {"run_id": "a1", "cancelled": True}
    assert (await client.post("/runs/a1/cancel")).json()["cancelled"] is False
    retried = await client.post("/runs/a1/retry")
    assert retried.status_code == 200
    assert retried.json()["status"] == "pending"
    again = await client.post("/runs/a1/retry")  # it is live again: nothing to retry
    assert again.status_code == 409
    assert again.json()["type"] == "run_exists"
    assert "only failed, dead or cancelled" in again.json()["message"]


async def test_publishing_an_event_starts_its_subscribers(
    client: httpx.AsyncClient, engine: runlane.Engine
) -> None:
    response = await client.post("/events/order.placed?id=evt-1", json={"order": 7})
    assert response.status_code == 202
    assert response.json() == {"event": "order.placed", "touched": 1}
    duplicate = await client.post("/events/order.placed?id=evt-1", json={"order": 7})
    assert duplicate.json()["touched"] == 0
    [run] = await engine.list_runs(workflow="on-order")
    assert run.input == {"order": 7}


async def test_the_app_lifespan_runs_the_engine(tmp_path: Path) -> None:
    engine = runlane.Engine(
        store=SqliteStore(tmp_path / "life.db"), workflows=[nightly], poll_interval=0.05
    )
    app = create_app(engine)
    async with app.router.lifespan_context(app):
        run = await engine.start("nightly", {"store": "n"}, "n1")
        done = await engine.wait_for_run(run.id, timeout=10)
    assert done.output == "synced"


async def test_an_unreachable_store_answers_503_with_retry_after(
    engine: runlane.Engine, client: httpx.AsyncClient
) -> None:
    from tests.outages import FlakyStore

    flaky = FlakyStore(engine.store)
    engine.store = flaky
    flaky.down = True
    response = await client.get("/runs")
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    assert response.json()["error"] == "StoreUnavailableError"
    assert "server closed the connection" in response.json()["message"]
    flaky.down = False
    assert (await client.get("/runs")).status_code == 200
