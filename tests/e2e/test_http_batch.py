"""``POST /runs:batch`` on every store: each start answered in its place as ``POST /runs`` would
answer it, a malformed body refused whole, the scoped tokens and the audit log as for a start."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

import runlane
from runlane import Concurrency, Debounce, Singleton
from runlane.stores.base import Store
from runlane.testing import ManualClock

from .test_http_operations import client_of

OPS = {"Authorization": "Bearer op-secret"}
VIEWER = {"Authorization": "Bearer read-secret"}


@runlane.workflow(name="tenant", concurrency=Concurrency(key=lambda i: f"tenant:{i['t']}", limit=1))
async def tenant(ctx: runlane.Context, input: Any) -> Any:
    return input


@runlane.workflow(name="lane", singleton=Singleton(key=lambda i: "one", max_queue_depth=1))
async def lane(ctx: runlane.Context, input: Any) -> Any:
    return input


@runlane.workflow(name="folded", debounce=Debounce(key=lambda i: "doc", period=5))
async def folded(ctx: runlane.Context, input: Any) -> Any:
    return input


@pytest.fixture
async def engine(make_store: Callable[[], Store], store_kind: str) -> AsyncIterator[runlane.Engine]:
    store = make_store()
    if store_kind == "postgres":
        await store.open()
        await store.reset_for_tests()  # type: ignore[attr-defined]
        await store.close()
    built = runlane.Engine(
        store, workflows=[tenant, lane, folded], clock=ManualClock(), drive=False
    )
    async with built:
        yield built


@pytest.fixture
async def client(engine: runlane.Engine) -> AsyncIterator[httpx.AsyncClient]:
    tokens = "ops:operate:op-secret,viewer:read:read-secret"
    async with client_of(engine, tokens=tokens) as client:
        yield client


def batch(*runs: dict[str, Any]) -> dict[str, Any]:
    return {"runs": list(runs)}


async def test_each_start_is_answered_in_its_place(
    client: httpx.AsyncClient, engine: runlane.Engine
) -> None:
    await engine.start(tenant, {"t": "old"}, run_id="old")
    answer = await client.post(
        "/runs:batch",
        json=batch(
            {"workflow": "tenant", "input": {"t": "acme"}, "run_id": "a1"},
            {"workflow": "tenant", "input": {"t": "acme"}, "run_id": "a2"},
            {"workflow": "tenant", "input": {"t": "other"}, "run_id": "old"},
            {"workflow": "tenant", "input": {"t": "old"}, "run_id": "old", "if_exists": "fail"},
            {"workflow": "nope"},
            {"workflow": "lane", "input": 1, "run_id": "l1"},
            {"workflow": "lane", "input": 2, "run_id": "l2"},
            {"workflow": "lane", "input": 3, "run_id": "l3"},
            {"workflow": "folded", "input": 1, "run_id": "f1"},
            {"workflow": "folded", "input": 2, "run_id": "f2"},
        ),
        headers=OPS,
    )
    assert answer.status_code == 200
    runs = answer.json()["runs"]
    assert [r["status"] for r in runs] == [201, 429, 200, 409, 404, 201, 201, 429, 201, 200]
    assert runs[0]["run"]["id"] == "a1" and runs[0]["run"]["created"] is True
    refused = runs[1]["error"]
    assert (refused["type"], refused["key"], refused["limit"]) == (
        "concurrency_limit",
        "tenant:acme",
        1,
    )
    assert runs[1]["retry_after"] == 1
    assert runs[2]["run"]["id"] == "old" and runs[2]["run"]["input_differs"] is True
    assert runs[3]["error"]["type"] == "run_exists"
    assert runs[4]["error"]["type"] == "unknown_workflow"
    assert [runs[n]["run"]["status"] for n in (5, 6)] == ["pending", "blocked"]
    assert runs[7]["error"]["type"] == "singleton_queue_full"
    assert runs[9]["run"]["id"] == "f1" and runs[9]["run"]["debounced"] is True
    assert await engine.get_run("a2") is None and await engine.get_run("l3") is None


@pytest.mark.parametrize(
    "body",
    [
        None,
        [],
        {"runs": []},
        {"runs": "x"},
        {"runs": [{"workflow": "tenant"}], "extra": 1},
        {"runs": [{"workflow": "tenant"}, {"workflow": "tenant", "priority": "high"}]},
        {"runs": [{"workflow": "tenant"}] * 1001},
    ],
)
async def test_a_malformed_body_is_refused_whole_and_nothing_is_started(
    client: httpx.AsyncClient, engine: runlane.Engine, body: Any
) -> None:
    answer = await client.post("/runs:batch", json=body, headers=OPS)
    assert answer.status_code == 422
    assert answer.json()["type"] == "invalid_request"
    assert await engine.list_runs() == []


async def test_a_bad_start_is_named_by_its_place(client: httpx.AsyncClient) -> None:
    body = batch({"workflow": "tenant"}, {"workflow": "tenant", "priority": "high"})
    answer = (await client.post("/runs:batch", json=body, headers=OPS)).json()
    assert answer["field"] == "runs[1].priority" and answer["message"].startswith("runs[1]: ")


async def test_a_read_token_may_not_start_a_batch_and_the_batch_is_audited(
    client: httpx.AsyncClient, engine: runlane.Engine
) -> None:
    body = batch(
        {"workflow": "tenant", "input": {"t": "x"}}, {"workflow": "tenant", "input": {"t": "x"}}
    )
    refused = await client.post("/runs:batch", json=body, headers=VIEWER)
    assert refused.status_code == 403 and await engine.list_runs() == []
    assert (await client.post("/runs:batch", json=body, headers=OPS)).status_code == 200
    entries = (await client.get("/audit", headers=VIEWER)).json()["entries"]
    rows = [(e["actor"], e["action"], e["detail"], e["outcome"]) for e in entries]
    assert rows == [
        ("ops", "start_batch", "2 starts: 1 created, 0 existing, 1 refused", "ok"),
        ("viewer", "start_batch", None, "403 forbidden"),
    ]


async def test_the_route_is_in_the_openapi_document(client: httpx.AsyncClient) -> None:
    document = (await client.get("/openapi.json", headers=VIEWER)).json()
    operation = document["paths"]["/runs:batch"]["post"]
    assert set(operation["responses"]) >= {"200", "403", "422"}
    assert (
        document["components"]["schemas"]["BatchRequest"]["properties"]["runs"]["maxItems"] == 1000
    )
