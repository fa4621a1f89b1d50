"""The operator's HTTP API: paging, re-posted starts, a run's detail, the lanes, the token."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

import runlane
from runlane.http import create_app
from runlane.http.auth import exposure_problem
from runlane.stores.sqlite import SqliteStore
from runlane.testing import ManualClock


@runlane.workflow(name="job")
async def job(ctx: runlane.Context, input: Any) -> Any:
    if input == "fail":
        raise runlane.FatalError("no")
    if input == "wait":
        await ctx.wait_for_signal("go")
    return await ctx.step(double, 2)


@runlane.step(name="double")
def double(value: int) -> int:
    return value * 2


@runlane.workflow(name="parent")
async def parent(ctx: runlane.Context, input: Any) -> Any:
    return await ctx.child(job, "ok")


@runlane.workflow(
    name="sync",
    singleton=runlane.Singleton(key=lambda i: f"store:{i['store']}"),
    concurrency=runlane.Concurrency(key=lambda i: f"tenant:{i['tenant']}", limit=5),
)
async def sync(ctx: runlane.Context, input: Any) -> str:
    await ctx.wait_for_signal("done")
    return "synced"


RELEASE: dict[str, asyncio.Event] = {}


@runlane.step(name="call_api", queue="api")
async def call_api(name: str) -> str:
    gate = RELEASE.setdefault(name, asyncio.Event())
    await gate.wait()
    return name


@runlane.workflow(name="queued")
async def queued(ctx: runlane.Context, input: Any) -> Any:
    return await ctx.step(call_api, input)


@runlane.workflow(
    name="report",
    rate_limit=runlane.RateLimit(2, 60, key=lambda i: i["tenant"], on_limit="delay"),
)
async def report(ctx: runlane.Context, input: Any) -> Any:
    return input


@runlane.workflow(name="reindex", debounce=runlane.Debounce(key=lambda i: i["doc"], period=5))
async def reindex(ctx: runlane.Context, input: Any) -> Any:
    return input


API_QUEUE = runlane.StepQueue("api", concurrency=1, rate_limit=runlane.RateLimit(10, 60))


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[runlane.Engine]:
    built = runlane.Engine(
        store=SqliteStore(tmp_path / "ops.db"),
        workflows=[job, parent, sync, queued, report, reindex],
        steps=[double, call_api],
        queues=[API_QUEUE],
        clock=ManualClock(),
        drive=False,
    )
    async with built:
        yield built


def client_of(engine: runlane.Engine, **options: Any) -> httpx.AsyncClient:
    app = create_app(engine, manage_engine=False, **options)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://runlane")


@pytest.fixture
async def client(engine: runlane.Engine) -> AsyncIterator[httpx.AsyncClient]:
    async with client_of(engine) as client:
        yield client


async def test_pages_walk_every_run_once_newest_first(
    client: httpx.AsyncClient, engine: runlane.Engine
) -> None:
    for n in range(120):
        await engine.start("job", "ok", f"r{n:03}")
        engine.clock.advance(1)  # type: ignore[attr-defined]
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": "50", **({"cursor": cursor} if cursor else {})}
        body = (await client.get("/runs", params=params)).json()
        seen += [r["id"] for r in body["runs"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == [f"r{n:03}" for n in reversed(range(120))]
    bad = await client.get("/runs", params={"cursor": "not-a-cursor"})
    assert (bad.status_code, bad.json()["type"]) == (422, "invalid_request")


async def test_the_summary_counts_every_run_not_only_the_first_page(
    client: httpx.AsyncClient, engine: runlane.Engine
) -> None:
    await engine.start("job", "fail", "failed-one")
    await engine.start("job", "wait", "waiting-one")
    await engine.run_pending()
    for n in range(110):
        await engine.start("job", "ok", f"later-{n}")
    body = (await client.get("/stats/runs")).json()
    assert body == {"counts": {"failed": 1, "pending": 110, "suspended": 1}, "total": 112}
    failed = (await client.get("/runs", params={"status": "failed"})).json()["runs"]
    assert [r["id"] for r in failed] == ["failed-one"]


async def test_runs_filter_by_creation_time(
    client: httpx.AsyncClient, engine: runlane.Engine
) -> None:
    first = await engine.start("job", "ok", "early")
    engine.clock.advance(60)  # type: ignore[attr-defined]
    await engine.start("job", "ok", "late")
    since = (first.created_at.replace(tzinfo=None)).isoformat(timespec="seconds")
    assert [r["id"] for r in (await client.get(f"/runs?created_from={since}Z")).json()["runs"]] == [
        "late",
        "early",
    ]
    until = first.created_at.isoformat().replace("+00:00", "Z")
    later = await client.get("/runs", params={"created_from": until, "created_until": until})
    assert later.json()["runs"] == []
    wrong = await client.get("/runs", params={"created_from": "yesterday"})
    assert (wrong.status_code, wrong.json()["field"]) == (422, "created_from")


async def test_reposting_a_run_id_answers_200_and_says_whether_the_input_differs(
    client: httpx.AsyncClient,
) -> None:
    first = await client.post("/runs", json={"workflow": "job", "input": "ok", "run_id": "x"})
    assert first.status_code == 201
    assert (first.json()["created"], first.json()["input_differs"]) == (True, False)
    same = await client.post("/runs", json={"workflow": "job", "input": "ok", "run_id": "x"})
    assert same.status_code == 200
    assert (same.json()["created"], same.json()["input_differs"]) == (False, False)
    other = await client.post("/runs", json={"workflow": "job", "input": "wait", "run_id": "x"})
    assert other.status_code == 200
    assert (other.json()["input"], other.json()["input_differs"]) == ("ok", True)
    refused = await client.post(
        "/runs", json={"workflow": "job", "run_id": "x", "if_exists": "fail"}
    )
    assert refused.status_code == 409
    assert (refused.json()["type"], refused.json()["status"]) == ("run_exists", "pending")


async def test_a_run_detail_has_its_steps_and_children(
    client: httpx.AsyncClient, engine: runlane.Engine
) -> None:
    await engine.start("parent", None, "p1")
    for _ in range(4):
        await engine.tick()
    body = (await client.get("/runs/p1")).json()
    assert body["status"] == "completed"
    assert [(s["kind"], s["status"]) for s in body["steps"]] == [("child", "completed")]
    assert [c["id"] for c in body["children"]] == ["p1.child.1"]
    child = (await client.get("/runs/p1.child.1")).json()
    assert [(s["name"], s["output"], s["attempts"]) for s in child["steps"]] == [("double", 4, 1)]


async def test_a_run_address_opened_in_a_browser_is_its_page(client: httpx.AsyncClient) -> None:
    await client.post("/runs", json={"workflow": "job", "input": "ok", "run_id": "x"})
    html = {"Accept": "text/html,application/xhtml+xml"}
    moved = await client.get("/runs/x", headers=html)
    assert (moved.status_code, moved.headers["location"]) == (303, "/ui/runs/x")
    page = await client.get("/runs/x", headers=html, follow_redirects=True)
    assert page.headers["content-type"].startswith("text/html")
    assert 'src="/static/js/app.js"' in page.text
    data = await client.get("/runs/x", headers={"Accept": "application/json"})
    assert data.json()["id"] == "x"


async def test_lanes_show_holders_waiters_in_order_and_usage(
    client: httpx.AsyncClient, engine: runlane.Engine
) -> None:
    for n in range(3):
        await engine.start("sync", {"store": "A", "tenant": "acme"}, f"s{n}")
        engine.clock.advance(1)  # type: ignore[attr-defined]
    await engine.start("sync", {"store": "B", "tenant": "acme"}, "b0")
    await engine.run_pending()
    body = (await client.get("/lanes")).json()
    lanes = {(lane["kind"], lane["key"]): lane for lane in body["lanes"]}
    store_a = lanes["singleton", "store:A"]
    assert (store_a["workflow"], store_a["limit"], store_a["usage"]) == ("sync", 1, 1)
    assert [r["id"] for r in store_a["holders"]] == ["s0"]
    assert [(r["id"], r["status"]) for r in store_a["waiters"]] == [
        ("s1", "blocked"),
        ("s2", "blocked"),
    ]
    quota = lanes["concurrency", "tenant:acme"]
    assert (quota["limit"], quota["usage"], quota["waiters"]) == (5, 4, [])
    only = (await client.get("/lanes", params={"key": "store:B"})).json()["lanes"]
    assert [(lane["key"], [r["id"] for r in lane["holders"]]) for lane in only] == [
        ("store:B", ["b0"])
    ]


async def test_the_lanes_overview_lists_a_lanes_first_waiters_and_its_key_lists_every_one(
    client: httpx.AsyncClient, engine: runlane.Engine
) -> None:
    for n in range(7):
        await engine.start("sync", {"store": "A", "tenant": f"t{n}"}, f"s{n}")
        engine.clock.advance(1)  # type: ignore[attr-defined]
    await engine.run_pending()
    [lane] = [x for x in (await client.get("/lanes")).json()["lanes"] if x["kind"] == "singleton"]
    assert (lane["usage"], lane["waiting"]) == (1, 6)
    assert [r["id"] for r in lane["holders"]] == ["s0"]
    assert [r["id"] for r in lane["waiters"]] == ["s1", "s2", "s3"]  # the first in line
    assert set(lane["waiters"][0]) == {"id", "workflow", "status", "created_at"}
    [whole] = [
        x
        for x in (await client.get("/lanes", params={"key": "store:A"})).json()["lanes"]
        if x["kind"] == "singleton"
    ]
    assert [r["id"] for r in whole["waiters"]] == ["s1", "s2", "s3", "s4", "s5", "s6"]
    assert whole["waiting"] == 6
    # A run past the overview's list still learns its place in line.
    last = (await client.get("/runs/s6")).json()["waiting_for"]
    assert (last["kind"], last["position"], last["waiting"]) == ("slot", 6, 6)


async def test_lanes_show_a_step_queues_holder_waiters_in_order_and_rate_window(
    client: httpx.AsyncClient, engine: runlane.Engine
) -> None:
    await engine.start("queued", "h", "holder")
    turn = asyncio.create_task(engine.run_pending())
    for _ in range(200):
        if "h" in RELEASE:
            break
        await asyncio.sleep(0.01)
    await engine.start("queued", "w1", "w1")
    await engine.start("queued", "w2", "w2")
    await engine.run_pending()
    [api] = (await client.get("/lanes")).json()["queues"]
    assert (api["name"], api["concurrency"], api["usage"]) == ("api", 1, 1)
    assert [(e["run_id"], e["seq"]) for e in api["holders"]] == [("holder", 1)]
    assert [e["run_id"] for e in api["waiters"]] == ["w1", "w2"]
    assert (api["rate"]["limit"], api["rate"]["period"], api["rate"]["used"]) == (10, 60.0, 1)
    only = await client.get("/lanes", params={"key": "elsewhere"})
    assert only.json() == {"lanes": [], "queues": [], "limits": []}
    for name in ("h", "w1", "w2"):  # the waiters are woken in turn as each slot frees
        RELEASE.setdefault(name, asyncio.Event()).set()
    await turn
    for run_id in ("holder", "w1", "w2"):
        assert (await engine.wait_for_run(run_id, timeout=5)).output == run_id.replace(
            "holder", "h"
        )


def iso(moment: datetime) -> str:
    return moment.isoformat()


async def test_lanes_show_a_throttles_window_and_a_debounces_run_and_when_it_fires(
    client: httpx.AsyncClient, engine: runlane.Engine
) -> None:
    t0 = engine.now()
    for n in range(3):  # the third is throttled: counted, and begun, when the window has room
        await engine.start("report", {"tenant": "acme"}, f"r{n}")
    engine.clock.advance(10)  # type: ignore[attr-defined]
    await engine.start("reindex", {"doc": "x", "v": 1}, "d1")
    engine.clock.advance(2)  # type: ignore[attr-defined]
    folded = await engine.start("reindex", {"doc": "x", "v": 2}, "d2")
    assert folded.id == "d1"
    now = engine.now()
    rate, debounce = (await client.get("/lanes")).json()["limits"]
    assert (rate["kind"], rate["key"], rate["workflow"], rate["limit"], rate["period"]) == (
        "rate_limit",
        "acme",
        "report",
        2,
        60.0,
    )
    assert (rate["used"], rate["window_start"]) == (2, iso(now - timedelta(seconds=60)))
    assert [(r["id"], r["counted_at"]) for r in rate["counted"]] == [
        ("r0", iso(t0)),
        ("r1", iso(t0)),
    ]
    assert [(r["id"], r["status"]) for r in rate["held"]] == [("r2", "blocked")]
    assert rate["resets_at"] == iso(t0 + timedelta(seconds=60))
    assert rate["clears_at"] == iso(t0 + timedelta(seconds=120))
    assert (debounce["kind"], debounce["key"], debounce["workflow"]) == ("debounce", "x", "reindex")
    assert (debounce["run"]["id"], debounce["first_at"], debounce["fires_at"]) == (
        "d1",
        iso(t0 + timedelta(seconds=10)),
        iso(now + timedelta(seconds=5)),
    )
    only = (await client.get("/lanes", params={"key": "x"})).json()
    assert [lane["kind"] for lane in only["limits"]] == ["debounce"]
    engine.clock.advance(120)  # type: ignore[attr-defined]
    assert (await client.get("/lanes")).json()["limits"] == []


async def test_unknown_routes_and_methods_answer_typed_json(client: httpx.AsyncClient) -> None:
    missing = await client.get("/nope")
    assert (missing.status_code, missing.json()["type"]) == (404, "not_found")
    wrong = await client.delete("/runs")
    assert (wrong.status_code, wrong.json()["type"]) == (405, "method_not_allowed")


async def test_a_token_guards_every_request_but_healthz_and_the_pages(
    engine: runlane.Engine,
) -> None:
    async with client_of(engine, token="s3cret") as client:
        refused = await client.get("/runs")
        assert (refused.status_code, refused.json()["type"]) == (401, "unauthorized")
        assert refused.headers["www-authenticate"] == "Bearer"
        wrong = await client.post("/runs", json={}, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        ok = await client.get("/runs", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        assert (await client.get("/healthz")).json() == {"ok": True}
        for page in ("/", "/ui/lanes", "/ui/runs/x", "/ui/schedules", "/static/js/core.js"):
            assert (await client.get(page)).status_code == 200, page
        assert (await client.get("/openapi.json")).status_code == 401


async def test_the_token_comes_from_the_environment(
    engine: runlane.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUNLANE_API_TOKEN", "from-env")
    async with client_of(engine) as client:
        assert (await client.get("/lanes")).status_code == 401
        headers = {"Authorization": "Bearer from-env"}
        assert (await client.get("/lanes", headers=headers)).status_code == 200


@pytest.mark.parametrize(
    ("host", "token", "refused"),
    [
        ("127.0.0.1", None, False),
        ("localhost", None, False),
        ("::1", None, False),
        ("0.0.0.0", None, True),
        ("192.0.2.7", None, True),
        ("0.0.0.0", "s3cret", False),
    ],
)
def test_serving_beyond_loopback_needs_a_token(host: str, token: str | None, refused: bool) -> None:
    problem = exposure_problem(host, token)
    assert (problem is not None) == refused
    if problem:
        assert "RUNLANE_API_TOKEN" in problem and host in problem


async def test_schedules_are_listed_paused_resumed_and_triggered(
    client: httpx.AsyncClient, engine: runlane.Engine
) -> None:
    await engine.schedules.upsert(runlane.Schedule("hourly", "job", every=3600, input=1))
    listed = (await client.get("/schedules")).json()["schedules"]
    assert [(s["id"], s["workflow"], s["every"], s["paused"]) for s in listed] == [
        ("hourly", "job", 3600.0, False)
    ]
    paused = await client.post("/schedules/hourly/pause")
    assert paused.status_code == 200 and paused.json()["paused"] is True
    assert paused.json()["next_fire_at"] is None
    resumed = await client.post("/schedules/hourly/resume")
    assert resumed.json()["paused"] is False and resumed.json()["next_fire_at"]
    triggered = await client.post("/schedules/hourly/trigger")
    assert triggered.status_code == 201
    assert triggered.json()["id"].startswith("sched:hourly:manual:")
    assert "schedule:hourly" in triggered.json()["tags"]
    missing = await client.post("/schedules/nope/trigger")
    assert missing.status_code == 404 and missing.json()["type"] == "schedule_not_found"
    unknown = await client.post("/schedules/hourly/explode")
    assert unknown.status_code == 404
