"""The HTTP API of an engine fenced to its namespace (``scope_reads=True``): it serves that
namespace's runs only, and answers 404 for every operation on another namespace's run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import runlane
from runlane.stores.sqlite import SqliteStore

from ..helpers import api_client


@runlane.workflow(
    name="sync",
    singleton=runlane.Singleton(key=lambda i: f"store:{i['store']}"),
    concurrency=runlane.Concurrency(key=lambda i: f"api:{i['store']}", limit=1),
)
async def sync(ctx: runlane.Context, input: dict[str, Any]) -> Any:
    if await ctx.wait_for_signal("go") == "fail":
        raise runlane.FatalError("asked to fail")
    return "done"


@pytest.fixture
async def engines(tmp_path: Path) -> AsyncIterator[tuple[runlane.Engine, runlane.Engine]]:
    """The served engine, fenced to ``eu``, and an engine of ``us`` on the same store."""

    def build(namespace: str) -> runlane.Engine:
        store = SqliteStore(tmp_path / "namespaces.db")
        return runlane.Engine(
            store=store, workflows=[sync], namespace=namespace, scope_reads=True, drive=False
        )

    eu, us = build("eu"), build("us")
    async with eu, us:
        for engine, run_id, store in ((eu, "e1", "A"), (us, "u1", "A"), (us, "u2", "B")):
            await engine.start(sync, {"store": store}, run_id)
            await engine.tick()
        await us.signal("u2", "go", "fail")
        await us.tick()
        yield eu, us


@pytest.fixture
async def client(
    engines: tuple[runlane.Engine, runlane.Engine],
) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(engines[0]) as client:
        yield client


async def test_the_reads_show_the_served_namespace_only(client: httpx.AsyncClient) -> None:
    runs = (await client.get("/runs")).json()["runs"]
    assert [(r["id"], r["namespace"]) for r in runs] == [("e1", "eu")]
    assert (await client.get("/runs", params={"id": "u1"})).json()["runs"] == []
    assert (await client.get("/runs", params={"namespace": "us"})).json()["runs"] == []
    assert (await client.get("/stats/runs")).json() == {"counts": {"suspended": 1}, "total": 1}
    assert (await client.get("/runs/u1")).status_code == 404
    overview = (await client.get("/overview")).json()
    assert overview["active"] == {"suspended": 1}
    assert sum(m["started"] for m in overview["minutes"]) == 1
    workers = (await client.get("/workers")).json()
    assert (workers["engine"]["namespace"], workers["engine"]["scope_reads"]) == ("eu", True)


async def test_the_lanes_are_the_served_namespace_s_own(client: httpx.AsyncClient) -> None:
    lanes = (await client.get("/lanes")).json()["lanes"]
    shown = [(x["kind"], x["key"], x["namespace"], [h["id"] for h in x["holders"]]) for x in lanes]
    assert shown == [
        ("singleton", "store:A", "eu", ["e1"]),
        ("concurrency", "api:A", "eu", ["e1"]),
    ]
    assert [x["tag"] for x in lanes] == ["singleton:store:A", "concurrency:api:A"]
    metrics = (await client.get("/metrics")).text
    holding = 'runlane_lane_holding{key="api:A",kind="concurrency",namespace="eu",workflow=""} 1.0'
    assert holding in metrics
    assert 'namespace="us"' not in metrics
    assert 'runlane_active_runs{status="suspended",workflow="sync"} 1.0' in metrics


async def test_operations_on_another_namespace_run_answer_404(
    client: httpx.AsyncClient, engines: tuple[runlane.Engine, runlane.Engine]
) -> None:
    answers = [
        await client.post("/runs/u1/signal/go", json="from eu"),
        await client.post("/runs/u1/cancel"),
        await client.post("/runs/u2/retry"),
        await client.post(
            "/runs", json={"workflow": "sync", "input": {"store": "A"}, "run_id": "u1"}
        ),
    ]
    assert [a.status_code for a in answers] == [404] * 4
    assert {a.json()["type"] for a in answers} == {"run_not_found"}
    us = engines[1]
    assert [(await us.get_run(i)).status for i in ("u1", "u2")] == ["suspended", "failed"]  # type: ignore[union-attr]
    assert await us.read(lambda store: store.list_signals("u1")) == []


async def test_a_start_over_http_is_admitted_in_the_served_namespace_s_lanes(
    client: httpx.AsyncClient, engines: tuple[runlane.Engine, runlane.Engine]
) -> None:
    refused = await client.post("/runs", json={"workflow": "sync", "input": {"store": "A"}})
    assert refused.status_code == 429  # eu's own "api:A" quota is full (e1)
    assert (refused.json()["key"], refused.json()["active"]) == ("api:A", 1)
    # us's u1 holds the same key meanwhile, in a quota of us's own.
    assert (await engines[1].get_run("u1")).status == "suspended"  # type: ignore[union-attr]
    started = await client.post("/runs", json={"workflow": "sync", "input": {"store": "C"}})
    assert (started.status_code, started.json()["namespace"]) == (201, "eu")
