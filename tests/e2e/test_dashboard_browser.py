"""The dashboard in a real browser: Playwright driving Debian's chromium against `runlane serve`'s
app on a loopback port, with a token. Screenshots of each page land in the test's folder."""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

import runlane
from runlane.stores.sqlite import SqliteStore
from tests.servers import free_port

playwright = pytest.importorskip("playwright.sync_api")
uvicorn = pytest.importorskip("uvicorn")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = [
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
    pytest.mark.slow,
]
TOKEN = "browser-token"


@runlane.step(name="charge")
def charge(input: dict[str, Any]) -> dict[str, Any]:
    return {"charged": input["amount"]}


@runlane.step(name="explode", retry=runlane.Retry(max_attempts=2, backoff=0.01))
def explode(input: str) -> None:
    raise ValueError(f"boom: {input}")


@runlane.workflow(name="blow-up")
async def blow_up(ctx: runlane.Context, input: str) -> None:
    await ctx.step(explode, input)


@runlane.workflow(name="order")
async def order(ctx: runlane.Context, input: dict[str, Any]) -> Any:
    receipt = await ctx.step(charge, input)
    if input.get("hold"):
        await ctx.wait_for_signal("ship")
    return receipt


@runlane.workflow(name="sync", singleton=runlane.Singleton(key=lambda i: f"store:{i['store']}"))
async def sync(ctx: runlane.Context, input: dict[str, Any]) -> str:
    await ctx.wait_for_signal("done")
    return "synced"


@runlane.workflow(
    name="digest", rate_limit=runlane.RateLimit(1, 3600, key=lambda i: i, on_limit="delay")
)
async def digest(ctx: runlane.Context, input: str) -> str:
    return input


@runlane.workflow(name="reindex", debounce=runlane.Debounce(key=lambda i: i["doc"], period=3600))
async def reindex(ctx: runlane.Context, input: dict[str, Any]) -> str:
    return str(input["doc"])


class Served:
    """The HTTP app of a driving engine, served by uvicorn on a thread of its own."""

    def __init__(self, db: Path) -> None:
        from runlane.http import create_app

        engine = runlane.Engine(
            SqliteStore(db),
            workflows=[order, sync, digest, reindex, blow_up],
            steps=[charge, explode],
            poll_interval=0.05,
        )
        self.url = f"http://127.0.0.1:{free_port()}"
        config = uvicorn.Config(
            create_app(engine, token=TOKEN),
            host="127.0.0.1",
            port=int(self.url.rsplit(":", 1)[1]),
            log_level="warning",
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve()))

    def __enter__(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(20)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[httpx.Client]:
    with Served(tmp_path / "browser.db") as server:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=server.url, headers=headers) as client:
            for n in range(3):
                start(client, "order", {"amount": n, "hold": n == 1}, f"order-{n}")
            start(client, "sync", {"store": "A"}, "sync-1")
            start(client, "sync", {"store": "A"}, "sync-2")
            settle(client, {"order-0": "completed", "order-1": "suspended", "sync-2": "blocked"})
            yield client


def start(client: httpx.Client, workflow: str, input: Any, run_id: str) -> None:
    body = {"workflow": workflow, "input": input, "run_id": run_id}
    assert client.post("/runs", json=body).status_code == 201


def settle(client: httpx.Client, wanted: dict[str, str]) -> None:
    """Wait (bounded) until each run is in its wanted status; report what was seen if not."""
    deadline = time.monotonic() + 20
    seen: dict[str, str] = {}
    while time.monotonic() < deadline:
        seen = {run_id: client.get(f"/runs/{run_id}").json()["status"] for run_id in wanted}
        if seen == wanted:
            return
        time.sleep(0.1)
    raise AssertionError(f"runs did not settle: wanted {wanted}, saw {seen}")


def test_an_operator_filters_opens_a_run_sees_its_steps_and_cancels_it(
    served: httpx.Client, tmp_path: Path
) -> None:
    expect = playwright.expect
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(str(served.base_url))
        # No token yet: the page asks for it once and keeps it for the session.
        page.get_by_label("API token").fill(TOKEN)
        page.get_by_role("button", name="Use token").click()
        expect(page.locator("#summary")).to_contain_text("5 runs")
        expect(page.locator("#runs tr")).to_have_count(5)
        page.screenshot(path=tmp_path / "runs.png", full_page=True)

        page.select_option("#status", "suspended")
        expect(page.locator("#runs tr")).to_have_count(2)
        page.get_by_label("workflow").fill("order")
        page.get_by_role("button", name="Filter").click()
        expect(page.locator("#runs tr")).to_have_count(1)
        page.locator("#runs tr", has_text="order-1").click()

        expect(page).to_have_url(f"{served.base_url}/ui/runs/order-1")
        expect(page.locator("#status")).to_have_text("suspended")
        steps = page.locator("#steps tr")
        expect(steps.first).to_contain_text("charge")
        expect(steps.first).to_contain_text("completed")
        expect(steps.nth(1)).to_contain_text("ship")
        expect(page.locator("#input")).to_contain_text('"amount": 1')
        page.screenshot(path=tmp_path / "run.png", full_page=True)

        page.get_by_role("button", name="Cancel").click()
        expect(page.locator("#status")).to_have_text("cancelled")
        expect(page.get_by_role("button", name="Retry")).to_be_enabled()
        assert served.get("/runs/order-1").json()["status"] == "cancelled"

        page.goto(f"{served.base_url}/ui/lanes")
        lane = page.locator("section.lane[data-key='store:A']")
        expect(lane).to_contain_text("1 of 1 in use")
        expect(lane.locator("ol li").first).to_contain_text("sync-2")
        expect(lane.locator("ul li").first).to_contain_text("sync-1")
        page.screenshot(path=tmp_path / "lanes.png", full_page=True)

        # The holder finishes: the lane drains to its waiter, which now holds the slot.
        assert served.post("/runs/sync-1/signal/done").status_code == 202
        expect(lane.locator("ul li").first).to_contain_text("sync-2")
        expect(lane).to_contain_text("0 waiting")

        # Run-level limits are lanes too: a throttle's window, a debounce's run.
        start(served, "digest", "acme", "digest-1")
        start(served, "digest", "acme", "digest-2")
        start(served, "reindex", {"doc": "readme"}, "reindex-1")
        rate = page.locator("section.lane[data-kind='rate_limit']")
        expect(rate).to_contain_text("1 of 1 starts in the last 3600 s")
        expect(rate.locator("ul li").first).to_contain_text("digest-1")
        expect(rate.locator("ol li").first).to_contain_text("digest-2")
        debounce = page.locator("section.lane[data-kind='debounce']")
        expect(debounce).to_contain_text("readme")
        expect(debounce).to_contain_text("reindex-1")
        expect(debounce).to_contain_text("fires")
        page.screenshot(path=tmp_path / "lanes-limits.png", full_page=True)
        browser.close()


def signed_in(p: Any, served: httpx.Client, path: str) -> Any:
    """A page of a fresh browser at ``path``, its token given."""
    browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
    page = browser.new_page()
    page.goto(f"{served.base_url}{path}")
    page.get_by_label("API token").fill(TOKEN)
    page.get_by_role("button", name="Use token").click()
    return page


def test_a_runs_address_opened_in_a_browser_shows_the_page_not_a_cached_json_error(
    served: httpx.Client,
) -> None:
    # The page at /runs/{id} fetched its JSON from the same address: without Vary: Accept the
    # browser answered that fetch with the page it had cached ("Unexpected token '<'").
    with playwright.sync_playwright() as p:
        page = signed_in(p, served, "/runs/order-0")
        playwright.expect(page.locator("#status")).to_have_text("completed")
        page.wait_for_timeout(2500)  # past a refresh
        playwright.expect(page.locator("#problem")).to_have_text("")
        page.reload()
        playwright.expect(page.locator("#status")).to_have_text("completed")
        playwright.expect(page.locator("#problem")).to_have_text("")


def test_a_runs_json_and_its_page_never_share_a_cache_entry(served: httpx.Client) -> None:
    page = served.get("/runs/order-0", headers={"Accept": "text/html"}, follow_redirects=False)
    data = served.get("/runs/order-0")
    assert data.headers["content-type"] == "application/json"
    for answer in (page, data):
        assert "accept" in answer.headers["vary"].lower()
        assert "no-store" in answer.headers["cache-control"]


def test_an_opened_steps_details_stay_open_across_refreshes(served: httpx.Client) -> None:
    with playwright.sync_playwright() as p:
        page = signed_in(p, served, "/ui/runs/order-0")
        details = page.locator("#step-details details").first
        details.locator("summary").click()
        playwright.expect(details).to_have_attribute("open", "")
        page.wait_for_timeout(4500)  # two refreshes of the page
        playwright.expect(details).to_have_attribute("open", "")


def test_a_failed_runs_traceback_reads_as_lines(served: httpx.Client) -> None:
    start(served, "blow-up", "x", "boom-1")
    settle(served, {"boom-1": "failed"})
    with playwright.sync_playwright() as p:
        page = signed_in(p, served, "/ui/runs/boom-1")
        traceback = page.locator("#error pre.traceback")
        playwright.expect(traceback).to_contain_text("Traceback (most recent call last):")
        text = traceback.inner_text()
        assert "\\n" not in text
        assert "ValueError: boom: x" in text.splitlines()


def test_a_step_that_failed_twice_shows_its_attempts_and_its_whole_duration(
    served: httpx.Client,
) -> None:
    start(served, "blow-up", "y", "boom-2")
    settle(served, {"boom-2": "failed"})
    step = served.get("/runs/boom-2").json()["steps"][0]
    [first, _] = step["error"]["attempts"]
    with playwright.sync_playwright() as p:
        page = signed_in(p, served, "/ui/runs/boom-2")
        row = page.locator("#steps tr").first
        playwright.expect(row).to_contain_text("failed")
        took = float(row.locator("td").nth(6).inner_text().removesuffix(" s"))
        began, ended = (
            datetime.fromisoformat(t) for t in (first["started_at"], step["finished_at"])
        )
        assert took == pytest.approx((ended - began).total_seconds(), abs=0.006) and took > 0
        details = page.locator("#step-details details").first
        details.locator("summary").click()
        attempts = details.locator("ol.attempts li")
        playwright.expect(attempts).to_have_count(2)
        playwright.expect(attempts.first).to_contain_text("attempt 1")
        playwright.expect(attempts.nth(1)).to_contain_text("ValueError: boom: y")
