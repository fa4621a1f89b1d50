"""The console's reads over a real SQLite-backed engine: what a run waits for, the overview of
the last hour, the lanes over time, and the engines and workers the server knows of."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import runlane
from runlane.http import create_app
from runlane.stores.sqlite import SqliteStore
from runlane.testing import ManualClock
from runlane.transports import InProcessTransport

from ..helpers import api_client


@runlane.step(name="console.flaky", retry=runlane.Retry(max_attempts=3, backoff=30))
def flaky(_: Any) -> None:
    raise ValueError("not yet")


@runlane.workflow(name="console.napper")
async def napper(ctx: runlane.Context, _: Any) -> None:
    await ctx.sleep(600)


@runlane.workflow(name="console.approver")
async def approver(ctx: runlane.Context, _: Any) -> Any:
    return await ctx.wait_for_signal("approve", timeout=3600)


@runlane.workflow(name="console.retrier")
async def retrier(ctx: runlane.Context, _: Any) -> None:
    await ctx.step(flaky, None)


@runlane.workflow(name="console.parent")
async def parent(ctx: runlane.Context, _: Any) -> Any:
    return await ctx.child(approver, None)


@runlane.workflow(name="console.sync", singleton=runlane.Singleton(key=lambda i: i["store"]))
async def sync(ctx: runlane.Context, _: Any) -> Any:
    return await ctx.wait_for_signal("done")


@runlane.workflow(name="console.quick")
async def quick(ctx: runlane.Context, fail: bool) -> str:
    if fail:
        raise RuntimeError("broken")
    return "ok"


WORKFLOWS = [napper, approver, retrier, parent, sync, quick]


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[runlane.Engine]:
    engine = runlane.Engine(
        store=SqliteStore(tmp_path / "console.db"),
        workflows=WORKFLOWS,
        drive=False,
        clock=ManualClock(),
    )
    async with engine:
        yield engine


@pytest.fixture
async def client(engine: runlane.Engine) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(engine) as client:
        yield client


async def waits(client: httpx.AsyncClient, run_id: str) -> Any:
    return (await client.get(f"/runs/{run_id}")).json()["waiting_for"]


async def test_a_run_says_what_it_waits_for_and_until_when(
    client: httpx.AsyncClient, engine: runlane.Engine
) -> None:
    for workflow, run_id in [(napper, "nap"), (approver, "ask"), (retrier, "re"), (parent, "p")]:
        await engine.start(workflow, None, run_id)
    await engine.start(sync, {"store": "A"}, "s1")
    await engine.start(sync, {"store": "A"}, "s2")
    await engine.start(sync, {"store": "A"}, "s3")
    await engine.tick()
    now = engine.now()
    nap = await waits(client, "nap")
    assert (nap["kind"], nap["until"]) == ("sleep", (now + _s(600)).isoformat())
    signal = await waits(client, "ask")
    assert (signal["kind"], signal["name"]) == ("signal", "approve")
    assert signal["timeout_at"] == (now + _s(3600)).isoformat()
    retry = await waits(client, "re")
    assert (retry["kind"], retry["step"]) == ("retry", "console.flaky")
    assert "(attempt 2)" in retry["reason"]
    child = await waits(client, "p")
    assert (child["kind"], child["child"]) == ("child", "p.child.1")
    second, third = await waits(client, "s2"), await waits(client, "s3")
    assert (second["kind"], second["lane"], second["tag"]) == ("slot", "A", "singleton:A")
    assert [(w["position"], w["waiting"]) for w in (second, third)] == [(1, 2), (2, 2)]
    assert second["holders"] == ["s1"]
    assert (await waits(client, "s1"))["kind"] == "signal"
    await engine.pause("nap")
    paused = await waits(client, "nap")
    assert paused["kind"] == "resume" and "paused" in paused["reason"]
    await engine.signal("s1", "done")
    await engine.tick()
    assert (await waits(client, "s1")) is None


async def test_a_pending_run_of_a_version_no_live_engine_serves_says_so(
    client: httpx.AsyncClient, engine: runlane.Engine, tmp_path: Path
) -> None:
    @runlane.workflow(name="console.napper", version="2")
    async def napper_v2(ctx: runlane.Context, _: Any) -> None:
        return None

    web = runlane.Engine(
        store=SqliteStore(tmp_path / "console.db"), workflows=[napper_v2], announce=False
    )
    await web.start(napper_v2, None, "v2")  # started by a tool: nobody runs version 2
    wait = await waits(client, "v2")
    assert (wait["kind"], wait["served"]) == ("engine", False)
    assert "no live engine serves console.napper@2" in wait["reason"]
    await web.store.close()
    other = runlane.Engine(store=SqliteStore(tmp_path / "console.db"), workflows=[napper_v2])
    await other.get_run("v2")  # it opens, and announces that it serves version 2
    assert (await waits(client, "v2"))["served"] is True
    await other.store.close()


async def test_the_overview_counts_the_last_hours_starts_settlements_and_latency(
    client: httpx.AsyncClient, engine: runlane.Engine
) -> None:
    for n in range(3):
        await engine.start(quick, n == 2, f"q{n}")
    await engine.start(napper, None, "nap")
    engine.clock.advance(2)  # type: ignore[attr-defined]
    await engine.tick()
    body = (await client.get("/overview")).json()
    assert body["totals"] == {"started": 4, "completed": 2, "failed": 1, "cancelled": 0}
    assert body["active"] == {"suspended": 1}
    assert body["latency"]["p50"] == 5.0  # 2 s: the bucket up to 5 s
    assert len(body["minutes"]) in (60, 61)
    last = body["minutes"][-1]
    assert (last["started"], last["completed"], last["failed"]) == (4, 2, 1)


async def test_the_lanes_over_time_hold_each_sample_the_server_took(
    client: httpx.AsyncClient, engine: runlane.Engine
) -> None:
    await engine.start(sync, {"store": "B"}, "b1")
    await engine.start(sync, {"store": "B"}, "b2")
    await engine.tick()
    await client.get("/lanes")  # the lanes page's read is a sample
    engine.clock.advance(5)  # type: ignore[attr-defined]
    await engine.signal("b1", "done")
    await engine.tick()
    await client.get("/lanes")
    history = (await client.get("/lanes/history")).json()
    assert history["interval"] == 5.0 and len(history["times"]) == 2
    [lane] = [lane for lane in history["lanes"] if lane["key"] == "B"]
    assert (lane["kind"], lane["limit"]) == ("singleton", 1)
    assert lane["points"] == [[0, 1, 1], [1, 1, 0]]


async def test_the_engines_page_knows_this_engine_and_the_workers_it_heard(
    tmp_path: Path,
) -> None:
    transport = InProcessTransport()
    engine = runlane.Engine(
        store=SqliteStore(tmp_path / "w.db"),
        transport=transport,
        workflows=[quick],
        poll_interval=0.05,
    )
    worker = runlane.Worker("billing", transport, steps=[flaky], heartbeat_interval=0.05)
    app = create_app(engine, manage_engine=False)
    async with (
        engine,
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://runlane"
        ) as client,
    ):
        running = asyncio.create_task(worker.run())
        try:
            for _ in range(100):
                body = (await client.get("/workers")).json()
                if body["workers"]:
                    break
                await asyncio.sleep(0.05)
        finally:
            await worker.stop()
            await running
    assert body["engine"]["id"] == engine.id
    assert body["engine"]["serves"] == ["console.quick@1"]
    assert body["engine"]["transport"] == "InProcessTransport"
    [heard] = body["workers"]
    assert (heard["worker"], heard["group"], heard["steps"]) == (
        worker.name,
        "billing",
        ["console.flaky"],
    )


def _s(seconds: float) -> Any:
    from datetime import timedelta

    return timedelta(seconds=seconds)


async def test_runs_are_found_by_id_when_the_other_filters_match(
    client: httpx.AsyncClient, engine: runlane.Engine
) -> None:
    await engine.start(quick, False, "q1")
    ids = [
        [r["id"] for r in (await client.get(f"/runs?{query}")).json()["runs"]]
        for query in ("id=q1", "id=q1&workflow=console.quick", "id=q1&status=failed", "id=q2")
    ]
    assert ids == [["q1"], ["q1"], [], []]
