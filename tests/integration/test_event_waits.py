"""An event published while a waiting run's turn is still going on (after the turn read the
events, before its suspension wrote the wait) wakes the run: the publish cannot see a wait that
is not written yet, so the suspension checks for such events itself."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

import runlane
from runlane import RunStatus

from ..helpers import settle


@runlane.workflow(name="awaits-order")
async def awaits_order(ctx: runlane.Context, wanted: str | None) -> Any:
    if wanted is None:
        return await ctx.wait_for_event("order.placed")
    return await ctx.wait_for_event("order.placed", match=lambda p: p["id"] == wanted)


def after_the_read(engine: Any, then: Any) -> None:
    """Run ``then()`` once, right after the turn's first read of the event log."""
    store = engine.store
    read = store.events_after
    done: list[bool] = []

    async def events_after(name: str, after: int, limit: int) -> Any:
        events = await read(name, after, limit)
        if not done:
            done.append(True)
            await then()
        return events

    store.events_after = events_after


async def test_an_event_published_during_the_waiting_turn_wakes_the_run(make_engine: Any) -> None:
    engine = await make_engine(awaits_order)
    after_the_read(engine, lambda: engine.publish_event("order.placed", {"id": "late"}))
    await engine.start(awaits_order, None, run_id="w")
    await engine.tick()
    del engine.store.events_after
    run = await settle(engine, "w")
    assert run.status == RunStatus.COMPLETED
    assert run.output == {"id": "late"}


async def test_a_non_matching_event_during_the_turn_rewakes_once_then_the_run_sleeps(
    make_engine: Any,
) -> None:
    engine = await make_engine(awaits_order)
    after_the_read(engine, lambda: engine.publish_event("order.placed", {"id": "other"}))
    await engine.start(awaits_order, "mine", run_id="w")
    await engine.tick()
    del engine.store.events_after
    await engine.tick()
    await engine.tick()
    run = await engine.get_run("w")
    assert run.status == RunStatus.SUSPENDED
    assert run.wake_at is None  # it read past the other event: no rewake loop
    await engine.publish_event("order.placed", {"id": "mine"})
    assert (await settle(engine, "w")).output == {"id": "mine"}


async def test_a_publish_in_flight_on_postgres_is_seen_by_the_suspension(
    make_engine: Any, store_kind: str
) -> None:
    """The publish's transaction has inserted the event and read the waits (none yet) but not
    committed when the turn suspends: the suspension waits for it, then sees the event."""
    if store_kind != "postgres":
        pytest.skip("PostgreSQL's concurrent transactions; the other stores write one at a time")
    engine = await make_engine(awaits_order)
    conn = await psycopg.AsyncConnection.connect(engine.store.url)
    committed: list[asyncio.Task[None]] = []

    async def commit_later() -> None:
        await asyncio.sleep(0.3)
        await conn.commit()

    async def publish_in_flight() -> None:
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended('runlane:events', 0))")
        await conn.execute(
            "INSERT INTO runlane_events (id, name, payload, created_at)"
            " VALUES ('e1', 'order.placed', '{\"id\": \"late\"}'::json, now())"
        )
        committed.append(asyncio.ensure_future(commit_later()))

    try:
        after_the_read(engine, publish_in_flight)
        await engine.start(awaits_order, None, run_id="w")
        await engine.tick()
        del engine.store.events_after
        await committed[0]
        run = await settle(engine, "w")
    finally:
        await conn.close()
    assert run.status == RunStatus.COMPLETED
    assert run.output == {"id": "late"}
