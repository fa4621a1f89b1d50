"""``GET /metrics``: the names the README lists, with their labels, counted per process; the
store's gauges read at most once per cache period, however often Prometheus scrapes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import runlane
from runlane.http import create_app
from runlane.stores.postgres import PostgresStore
from runlane.stores.sqlite import SqliteStore
from runlane.testing import ManualClock


@runlane.step(name="add_one")
def add_one(n: int) -> int:
    return n + 1


@runlane.workflow(name="count")
async def count(ctx: runlane.Context, input: Any) -> Any:
    if input == "fail":
        raise runlane.FatalError("no")
    return await ctx.step(add_one, input)


@runlane.workflow(
    name="exclusive",
    singleton=runlane.Singleton(key=lambda i: "only"),
    concurrency=runlane.Concurrency(key="tenant", limit=2),
)
async def exclusive(ctx: runlane.Context, input: Any) -> Any:
    return await ctx.wait_for_signal("go")


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[runlane.Engine]:
    built = runlane.Engine(
        store=SqliteStore(tmp_path / "metrics.db"),
        workflows=[count, exclusive],
        steps=[add_one],
        clock=ManualClock(),
        drive=False,
    )
    async with built:
        yield built


async def scrape(
    engine: runlane.Engine, app: Any = None
) -> dict[tuple[str, tuple[Any, ...]], float]:
    app = app or create_app(engine, manage_engine=False)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://runlane") as client:
        answer = await client.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            samples[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return samples


async def test_metrics_count_starts_finishes_refusals_and_step_durations(
    engine: runlane.Engine,
) -> None:
    await engine.start("count", 1, "a")
    await engine.start("count", "fail", "b")
    await engine.tick()
    await engine.start("exclusive", None, "x1")
    await engine.start("exclusive", None, "x2")
    with pytest.raises(runlane.ConcurrencyLimitError):
        await engine.start("exclusive", None, "x3")
    await engine.tick()
    got = await scrape(engine)
    assert got["runlane_runs_started_total", (("workflow", "count"),)] == 2
    assert got["runlane_runs_started_total", (("workflow", "exclusive"),)] == 2
    finished = "runlane_runs_finished_total"
    assert got[finished, (("status", "completed"), ("workflow", "count"))] == 1
    assert got[finished, (("status", "failed"), ("workflow", "count"))] == 1
    refused = ("reason", "concurrency"), ("workflow", "exclusive")
    assert got["runlane_starts_refused_total", refused] == 1
    step = ("step", "add_one"), ("workflow", "count")
    assert got["runlane_step_duration_seconds_count", step] == 1
    assert got["runlane_step_duration_seconds_bucket", (("le", "+Inf"), *step)] == 1
    active = "runlane_active_runs"
    assert got[active, (("status", "suspended"), ("workflow", "exclusive"))] == 1
    assert got[active, (("status", "blocked"), ("workflow", "exclusive"))] == 1
    assert got[active, (("status", "running"), ("workflow", "exclusive"))] == 0
    lane = ("key", "only"), ("kind", "singleton"), ("namespace", ""), ("workflow", "exclusive")
    assert got["runlane_lane_waiting", lane] == 1
    assert got["runlane_lane_holding", lane] == 1
    quota = ("key", "tenant"), ("kind", "concurrency"), ("namespace", ""), ("workflow", "")
    assert got["runlane_lane_holding", quota] == 2


async def test_a_hand_off_is_timed_from_the_settlement_to_the_next_turn(
    engine: runlane.Engine,
) -> None:
    await engine.start("exclusive", None, "x1")
    await engine.start("exclusive", None, "x2")
    await engine.tick()
    await engine.signal("x1", "go", 1)
    await engine.tick()
    got = await scrape(engine)
    assert got["runlane_handoff_seconds_count", (("workflow", "exclusive"),)] == 1


async def test_a_hand_off_to_another_engine_is_timed_from_the_release_stamp(pg_url: str) -> None:
    clock = ManualClock()

    def build() -> runlane.Engine:
        return runlane.Engine(
            store=PostgresStore(pg_url),
            workflows=[count, exclusive],
            steps=[add_one],
            clock=clock,
            drive=False,
        )

    releasing, admitting = build(), build()
    async with releasing, admitting:
        await releasing.store.reset_for_tests()  # type: ignore[attr-defined]
        await releasing.start("exclusive", None, "x1")
        await releasing.start("exclusive", None, "x2")
        await releasing.tick()  # x1 holds the lane's slot and waits; x2 is parked behind it
        assert (await releasing.get_run("x2")).status == runlane.RunStatus.BLOCKED  # type: ignore[union-attr]
        assert await releasing.cancel("x1")  # the release: x1 settles, x2 is woken and stamped
        clock.advance(0.3)
        await admitting.tick()  # the other engine admits x2 to the slot
        assert (await admitting.get_run("x2")).status == runlane.RunStatus.SUSPENDED  # type: ignore[union-attr]
        handoff = (("workflow", "exclusive"),)
        got = await scrape(admitting)
        assert got["runlane_handoff_seconds_count", handoff] == 1
        assert got["runlane_handoff_seconds_sum", handoff] == pytest.approx(0.3)
        assert got["runlane_handoff_seconds_bucket", (("le", "0.25"), *handoff)] == 0
        assert got["runlane_handoff_seconds_bucket", (("le", "0.5"), *handoff)] == 1
        # Timed once: the releasing engine saw no turn begin, and the stamp is gone.
        assert ("runlane_handoff_seconds_count", handoff) not in await scrape(releasing)
        assert (await admitting.get_run("x2")).handoff_at is None  # type: ignore[union-attr]


async def test_scrapes_within_the_cache_period_read_the_store_once(
    engine: runlane.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = 0
    real = engine.store.active_run_counts

    async def counted() -> Any:
        nonlocal reads
        reads += 1
        return await real()

    monkeypatch.setattr(engine.store, "active_run_counts", counted)
    app = create_app(engine, manage_engine=False)
    await engine.start("count", 1, "a")
    for _ in range(5):
        await scrape(engine, app)
    assert reads == 1
