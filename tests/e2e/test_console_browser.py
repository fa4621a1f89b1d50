"""The console in a real browser: Playwright driving Debian's chromium against `runlane serve`'s
app on a loopback port, with a token. Every page and action, what must survive a refresh, the
cache bug that must not come back, keyboard use, no console errors, and an axe-core check of
every page (npm's axe-core, installed in tests/e2e/axe by `npm ci`).

With RUNLANE_SCREENSHOTS=<folder>, the screenshots of each page are written there (the ones
in docs/console/ are made so); otherwise to the test's temporary folder.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.console_app import build
from tests.servers import free_port

playwright = pytest.importorskip("playwright.sync_api")
uvicorn = pytest.importorskip("uvicorn")
expect = playwright.expect

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
AXE = Path(__file__).parent / "axe" / "node_modules" / "axe-core" / "axe.min.js"
pytestmark = [
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
    pytest.mark.slow,
]
TOKEN = "browser-token"
READ_TOKEN = "browser-read-token"
PAGES = {
    "overview": "/",
    "runs": "/ui/runs",
    "run": "/ui/runs/order-fails",
    "run-waiting": "/ui/runs/sync-2",
    "lanes": "/ui/lanes",
    "schedules": "/ui/schedules",
    "engines": "/ui/engines",
}


class Served:
    """The console app of a driving engine, served by uvicorn on a thread of its own."""

    def __init__(self, db: Path) -> None:
        from runlane.http import create_app

        self.url = f"http://127.0.0.1:{free_port()}"
        readers = f"viewer:read:{READ_TOKEN}"
        app = create_app(build(db), token=TOKEN, tokens=readers, sample_every=0.5)
        config = uvicorn.Config(
            app, host="127.0.0.1", port=int(self.url.rsplit(":", 1)[1]), log_level="warning"
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


def start(client: httpx.Client, workflow: str, input: Any, run_id: str, **attributes: Any) -> None:
    body = {"workflow": workflow, "input": input, "run_id": run_id, "attributes": attributes}
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


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    with Served(tmp_path_factory.mktemp("console") / "console.db") as server:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=server.url, headers=headers) as client:
            order = {"amount": 12, "customer": "ada"}
            done = {**order, "items": ["mug", "tee"], "pages": 3}
            start(client, "shop.order", done, "order-done", customer="ada", tier=2)
            start(
                client,
                "shop.order",
                {**order, "hold": True},
                "order-held",
                customer="ada",
                tier="2",
            )
            start(client, "shop.order", {**order, "nap": 3600}, "order-asleep", customer="bob")
            start(client, "shop.order", {**order, "fail": True}, "order-fails")
            for n in range(3):
                start(client, "shop.sync", {"store": "A"}, f"sync-{n}")
            for n in range(6):  # a lane longer than the overview lists
                start(client, "shop.sync", {"store": "B"}, f"busy-{n}")
            settle(
                client,
                {
                    "order-done": "completed",
                    "order-held": "suspended",
                    "order-asleep": "suspended",
                    "order-fails": "failed",
                    "sync-0": "suspended",
                    "sync-2": "blocked",
                },
            )
            yield client


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


class Console:
    """A page of the console, its token given, that records every console error."""

    def __init__(self, browser: Any, served: httpx.Client, token: str | None = TOKEN) -> None:
        self.base = str(served.base_url)
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.context.grant_permissions(["clipboard-read", "clipboard-write"])
        if token:
            self.context.add_init_script(
                f"try {{ sessionStorage.setItem('runlane.token', '{token}') }} catch {{}}"
            )
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def open(self, path: str) -> Any:
        self.page.goto(self.base + path)
        return self.page


@pytest.fixture
def console(browser: Any, served: httpx.Client) -> Iterator[Console]:
    opened = Console(browser, served)
    yield opened
    opened.context.close()
    assert opened.errors == [], "console errors"


def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("RUNLANE_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def axe_violations(page: Any) -> list[dict[str, Any]]:
    page.add_script_tag(path=str(AXE))
    result = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    found: list[dict[str, Any]] = result["violations"]
    return [v for v in found if v["impact"] in ("serious", "critical")]


# ---------------------------------------------------------------- every page


@pytest.mark.skipif(not AXE.exists(), reason="axe-core is not installed: npm ci in tests/e2e/axe")
@pytest.mark.parametrize("theme", ["light", "dark"])
def test_every_page_renders_with_no_console_error_and_no_serious_axe_violation(
    browser: Any, served: httpx.Client, tmp_path: Path, theme: str
) -> None:
    opened = Console(browser, served)
    opened.context.add_init_script(
        f"try {{ localStorage.setItem('runlane.theme', '{theme}') }} catch {{}}"
    )
    folder = shots(tmp_path)
    ready = {
        "overview": "#tiles .tile",
        "runs": "#runs tr[data-item]",
        "run": "#timeline li",
        "run-waiting": "#waiting:not([hidden])",
        "lanes": "section.lane figure",
        "schedules": "section.schedule ol.fires li",
        "engines": "#engine dl",
    }
    for name, path in PAGES.items():
        page = opened.open(path)
        expect(page.locator(ready[name]).first).to_be_visible(timeout=15000)
        violations = axe_violations(page)
        assert violations == [], f"{name} ({theme}): {json.dumps(violations, indent=1)[:3000]}"
        suffix = "" if theme == "light" else "-dark"
        page.screenshot(path=folder / f"{name}{suffix}.png", full_page=True)
    opened.context.close()
    assert opened.errors == []


def test_the_token_is_asked_once_and_kept_for_the_session(
    browser: Any, served: httpx.Client
) -> None:
    opened = Console(browser, served, token=None)
    page = opened.open("/ui/runs")
    page.get_by_label("This API needs a token (RUNLANE_API_TOKENS)").fill(TOKEN)
    page.get_by_role("button", name="Use token").click()
    expect(page.locator("#runs tr[data-item='order-done']")).to_be_visible()
    page.get_by_role("link", name="Lanes").click()
    expect(page.locator("section.lane[data-key='store:A']")).to_be_visible()
    expect(page.locator("#login")).to_have_count(0)
    opened.context.close()
    # The first requests, made before the token was given, were refused: nothing else.
    assert all("401" in error for error in opened.errors), opened.errors


# ---------------------------------------------------------------- the cache bug


def test_a_read_token_sees_every_action_disabled_with_a_note(
    browser: Any, served: httpx.Client
) -> None:
    opened = Console(browser, served, token=READ_TOKEN)
    page = opened.open("/ui/runs/order-held")
    expect(page.locator("#timeline li").first).to_be_visible(timeout=15000)
    for action in ("pause", "resume", "cancel", "retry"):
        expect(page.locator(f"#{action}")).to_be_disabled()
    for form in ("signal", "update", "fork"):
        opener = page.locator(f"details[data-key='{form}'] > summary")
        expect(opener).to_have_attribute("aria-disabled", "true")
    expect(page.get_by_role("note")).to_contain_text("(viewer) may only read")
    expect(page.locator("#export")).to_be_enabled()  # reading is what it may do
    page = opened.open("/ui/runs")
    page.locator("#runs tr[data-item='order-held'] input.pick").check()
    expect(page.locator("#bulk-cancel")).to_be_disabled()
    expect(page.get_by_role("note")).to_contain_text("may only read")
    page = opened.open("/ui/schedules")
    expect(page.locator("button[data-action='trigger']").first).to_be_disabled()
    expect(page.get_by_role("note")).to_contain_text("may only read")
    opened.context.close()
    assert opened.errors == []
    # Nothing it saw was done: the runs are as they were.
    assert served.get("/runs/order-held").json()["status"] == "suspended"


def test_a_runs_address_opened_in_a_browser_shows_the_page_not_a_cached_json_error(
    console: Console,
) -> None:
    # The page at /runs/{id} fetched its JSON from the same address: without Vary: Accept the
    # browser answered that fetch with the page it had cached ("Unexpected token '<'").
    page = console.open("/runs/order-done")
    expect(page).to_have_url(f"{console.base}/ui/runs/order-done")
    expect(page.locator("#status")).to_have_text("completed")
    page.wait_for_timeout(2500)  # past a refresh
    expect(page.locator("#problem")).to_be_hidden()
    page.go_back()
    page.go_forward()
    page.reload()
    expect(page.locator("#status")).to_have_text("completed")
    expect(page.locator("#problem")).to_be_hidden()


def test_a_runs_json_and_its_page_never_share_a_cache_entry(served: httpx.Client) -> None:
    page = served.get("/runs/order-done", headers={"Accept": "text/html"})
    data = served.get("/runs/order-done")
    assert (page.status_code, page.headers["location"]) == (303, "/ui/runs/order-done")
    assert data.headers["content-type"] == "application/json"
    for answer in (page, data):
        assert "accept" in answer.headers["vary"].lower()
        assert "no-store" in answer.headers["cache-control"]


# ---------------------------------------------------------------- runs


def test_runs_are_searched_by_status_workflow_tag_and_id_and_the_search_is_the_address(
    console: Console,
) -> None:
    page = console.open("/ui/runs")
    expect(page.locator("#summary")).to_contain_text("runs match")
    page.select_option("#status", "suspended")
    expect(page).to_have_url(f"{console.base}/ui/runs?status=suspended")
    expect(page.locator("#runs tr[data-item]")).to_have_count(4)  # two orders, two lane holders
    page.get_by_label("workflow").fill("shop.order")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("#runs tr[data-item]")).to_have_count(2)
    # The address is the saved search: opened again, it shows the same runs.
    page.goto(page.url)
    expect(page.locator("#workflow")).to_have_value("shop.order")
    expect(page.locator("#runs tr[data-item]")).to_have_count(2)
    page.get_by_role("button", name="Clear").click()
    page.get_by_label("tag").fill("singleton:store:A")
    page.get_by_label("tag").press("Enter")
    expect(page.locator("#runs tr[data-item]")).to_have_count(3)
    page.get_by_role("button", name="Clear").click()
    page.get_by_label("run id").fill("order-fails")
    page.get_by_label("run id").press("Enter")
    expect(page.locator("#runs tr[data-item]")).to_have_count(1)
    expect(page.locator("#runs tr[data-item='order-fails']")).to_contain_text("failed")
    page.get_by_label("run id").fill("nosuch")
    page.get_by_label("run id").press("Enter")
    expect(page.locator("#runs")).to_contain_text("No run with id nosuch.")


def test_runs_are_searched_by_attributes_and_a_runs_attributes_link_to_the_search(
    console: Console,
) -> None:
    page = console.open("/ui/runs")
    expect(page.locator("#summary")).to_contain_text("runs match")
    page.get_by_label("attributes").fill("customer=ada")
    page.get_by_label("attributes").press("Enter")
    expect(page).to_have_url(f"{console.base}/ui/runs?attr.customer=ada")
    expect(page.locator("#runs tr[data-item]")).to_have_count(2)
    page.get_by_label("attributes").fill("customer=ada tier=2")  # a number: order-done only
    page.get_by_label("attributes").press("Enter")
    expect(page.locator("#runs tr[data-item]")).to_have_count(1)
    expect(page.locator("#runs tr[data-item='order-done']")).to_contain_text("tier=2")
    page.get_by_label("attributes").fill('tier="2"')  # the string
    page.get_by_label("attributes").press("Enter")
    expect(page.locator("#runs tr[data-item]")).to_have_count(1)
    expect(page.locator("#runs tr[data-item='order-held']")).to_be_visible()
    # The address is the saved search: opened again, it shows the same runs and the field.
    page.goto(page.url)
    expect(page.locator("#attributes")).to_have_value('tier="2"')
    expect(page.locator("#runs tr[data-item]")).to_have_count(1)
    # A run's attribute links to the runs that have it too.
    page = console.open("/ui/runs/order-done")
    page.get_by_role("link", name="customer=ada").click()
    expect(page).to_have_url(f"{console.base}/ui/runs?attr.customer=ada")
    expect(page.locator("#runs tr[data-item]")).to_have_count(2)


def test_runs_selected_are_cancelled_then_retried_in_bulk_after_a_confirmation(
    console: Console, served: httpx.Client
) -> None:
    for n in range(2):
        start(served, "shop.order", {"amount": n, "customer": "eve", "hold": True}, f"bulk-{n}")
    settle(served, {"bulk-0": "suspended", "bulk-1": "suspended"})
    page = console.open("/ui/runs?customer=eve&tag=shop&status=suspended")
    for n in range(2):
        page.get_by_label(f"Select run bulk-{n}").check()
    expect(page.locator("#selection")).to_have_text("2 selected")
    page.get_by_role("button", name="Cancel selected").click()
    page.get_by_role("button", name="Keep it").click()  # the confirmation says no
    assert served.get("/runs/bulk-0").json()["status"] == "suspended"
    page.get_by_role("button", name="Cancel selected").click()
    page.locator("dialog").get_by_role("button", name="Cancel").click()
    expect(page.locator("#notes")).to_contain_text("Cancel: 2 done")
    settle(served, {"bulk-0": "cancelled", "bulk-1": "cancelled"})
    page.select_option("#status", "cancelled")
    for n in range(2):
        page.get_by_label(f"Select run bulk-{n}").check()
    page.get_by_role("button", name="Retry selected").click()
    page.locator("dialog").get_by_role("button", name="Retry").click()
    expect(page.locator("#notes")).to_contain_text("Retry: 2 done")
    settle(served, {"bulk-0": "suspended", "bulk-1": "suspended"})


# ---------------------------------------------------------------- a run


def test_opened_step_details_and_folds_stay_open_across_refreshes(console: Console) -> None:
    page = console.open("/ui/runs/order-asleep")  # an active run: its page redraws as it goes
    step = page.locator("details.step[data-key='step-1']")
    step.locator("> summary").click()
    fold = step.locator("details.folded[data-key='out-1']")
    fold.locator("> summary").click()
    expect(fold).to_have_attribute("open", "")
    page.wait_for_timeout(4500)  # two refreshes
    expect(step).to_have_attribute("open", "")
    expect(fold).to_have_attribute("open", "")
    expect(fold).to_contain_text('"charged": 12')


def test_a_run_says_what_it_waits_for_and_links_to_it(console: Console) -> None:
    page = console.open("/ui/runs/order-asleep")
    expect(page.locator("#waiting")).to_contain_text("a sleep: it wakes at")
    expect(page.locator("#waiting time")).to_contain_text("in 59 min")
    page = console.open("/ui/runs/order-held")
    expect(page.locator("#waiting-reason")).to_contain_text("signal approve (times out at")
    page = console.open("/ui/runs/sync-2")
    reason = page.locator("#waiting-reason")
    expect(reason).to_have_text("a slot on lane store:A (1 of 1 held), number 2 of 2 in line")
    page.get_by_role("link", name="lane store:A").click()
    expect(page).to_have_url(f"{console.base}/ui/lanes?key=store%3AA")
    lane = page.locator("section.lane[data-key='store:A']")
    expect(lane.locator("ol li").nth(1)).to_contain_text("sync-2")


def test_a_failed_run_shows_its_attempts_on_the_timeline_and_its_tracebacks_as_lines(
    console: Console, served: httpx.Client
) -> None:
    page = console.open("/ui/runs/order-fails")
    row = page.locator("#timeline li").nth(1)
    expect(row.locator(".gantt-bar.failed")).to_have_count(2)
    expect(row.locator(".gantt-bar.backoff")).to_have_count(1)
    step = served.get("/runs/order-fails").json()["steps"][1]
    first = datetime.fromisoformat(step["error"]["attempts"][0]["started_at"])
    spent = (datetime.fromisoformat(step["finished_at"]) - first).total_seconds()
    shown = row.locator(".gantt-took").inner_text()
    assert shown.endswith(" ms") and abs(int(shown.removesuffix(" ms")) - spent * 1000) <= 1
    page.locator("details.step[data-key='step-2'] > summary").click()
    attempts = page.locator("table.attempts tbody tr")
    expect(attempts).to_have_count(2)
    expect(attempts.nth(1)).to_contain_text("ValueError: card declined for ada")
    traceback = page.locator("#error pre.traceback")
    expect(traceback).to_contain_text("Traceback (most recent call last):")
    lines = traceback.inner_text().splitlines()
    assert "ValueError: card declined for ada" in lines and not any("\\n" in x for x in lines)


def test_a_runs_actions_are_confirmed_cancel_retry_pause_resume_signal_and_fork(
    console: Console, served: httpx.Client
) -> None:
    start(served, "shop.order", {"amount": 3, "customer": "fay", "hold": True}, "acted")
    settle(served, {"acted": "suspended"})
    page = console.open("/ui/runs/acted")
    page.get_by_role("button", name="Cancel", exact=True).click()
    page.get_by_role("button", name="Keep it").click()
    expect(page.locator("#status")).to_have_text("suspended")
    page.get_by_role("button", name="Cancel", exact=True).click()
    page.locator("dialog").get_by_role("button", name="Cancel").click()
    expect(page.locator("#status")).to_have_text("cancelled")
    expect(page.get_by_role("button", name="Cancel", exact=True)).to_be_disabled()
    page.get_by_role("button", name="Retry").click()
    page.locator("dialog").get_by_role("button", name="Retry").click()
    expect(page.locator("#status")).to_have_text("suspended")
    page.get_by_role("button", name="Pause", exact=True).click()
    page.locator("dialog").get_by_role("button", name="Pause").click()
    expect(page.locator("#status")).to_have_text("paused")
    expect(page.locator("#waiting-reason")).to_contain_text("it is paused")
    expect(page.get_by_role("button", name="Pause", exact=True)).to_be_disabled()
    page.get_by_role("button", name="Resume", exact=True).click()
    page.locator("dialog").get_by_role("button", name="Resume").click()
    expect(page.locator("#status")).to_have_text("suspended")
    page.get_by_text("Send signal…").click()
    form = page.locator("form#signal")
    form.get_by_label("signal name").fill("approve")
    form.get_by_label("payload (JSON)").fill('{"by": "ops"}')
    form.get_by_role("button", name="Send", exact=True).click()
    page.locator("dialog").get_by_role("button", name="Send").click()
    expect(page.locator("#status")).to_have_text("completed")
    assert served.get("/runs/acted").json()["status"] == "completed"
    page.get_by_text("Fork…").click()
    page.locator("form#fork").get_by_role("button", name="Fork", exact=True).click()
    page.locator("dialog").get_by_role("button", name="Fork").click()
    expect(page.locator("#run-id")).to_have_text("acted.fork.1")
    expect(page.locator("#facts")).to_contain_text("forked from acted at #")
    assert served.get("/runs/acted.fork.1").json()["forked_from"][0] == "acted"


def test_an_update_is_sent_from_a_runs_page_and_its_reply_or_rejection_shown(
    console: Console, served: httpx.Client
) -> None:
    start(served, "shop.order", {"amount": 3, "customer": "gus", "ask": True}, "asked")
    settle(served, {"asked": "suspended"})
    page = console.open("/ui/runs/asked")
    expect(page.locator("#waiting-reason")).to_contain_text("update address")
    form = page.locator("form#update")
    for payload, said in (("", "update address failed: an address is needed"),
                          ('"1 Main St"', 'update address: reply {"ships_to":"1 Main St"}')):  # fmt: skip
        page.get_by_text("Send update…").click()
        form.get_by_label("update name").fill("address")
        form.get_by_label("payload (JSON)").fill(payload)
        form.get_by_role("button", name="Send", exact=True).click()
        dialog = page.locator("dialog")
        expect(dialog).to_contain_text("waits for the workflow's reply")
        dialog.get_by_role("button", name="Send").click()
        expect(page.locator("#notes")).to_contain_text(said)
    expect(page.locator("#status")).to_have_text("completed")
    # The browser logs the rejection's answer (409) as a failed load: the one error expected.
    [rejection] = [e for e in console.errors if "409 (Conflict)" in e]
    console.errors.remove(rejection)


def test_a_runs_children_unfold_and_its_history_downloads(console: Console) -> None:
    page = console.open("/ui/runs/order-done")
    children = page.locator("#children > li")
    expect(children).to_have_count(2)
    children.first.locator("details > summary").first.click()
    expect(children.first.locator("ul.tree")).to_contain_text("No children.")
    with page.expect_download() as download:
        page.get_by_role("button", name="Export history (JSON)").click()
    saved = json.loads(Path(download.value.path()).read_text())
    assert saved["id"] == "order-done" and len(saved["steps"]) == 6
    assert download.value.suggested_filename == "run-order-done.json"


# ---------------------------------------------------------------- the other pages


def test_the_lanes_page_shows_holders_waiters_in_order_and_usage_over_time(
    console: Console,
) -> None:
    page = console.open("/ui/lanes")
    lane = page.locator("section.lane[data-key='store:A']")
    expect(lane).to_contain_text("1 of 1 in use · 2 waiting")
    expect(lane.locator("ol li").first).to_contain_text("sync-1")
    chart = lane.locator("figure svg")
    expect(chart).to_have_attribute("aria-label", re.compile(r"^Lane store:A over the last \d+"))
    expect(chart).to_have_attribute("aria-label", re.compile(r"now 1 in use, 2 waiting$"))
    expect(page.locator("#sampled")).to_contain_text("the store keeps no history of lane usage")
    queue = page.locator("section.lane[data-queue='render-farm']")
    expect(queue).to_contain_text("0 of 2 slots")


def test_a_long_lane_lists_its_first_waiters_and_links_to_every_one(console: Console) -> None:
    page = console.open("/ui/lanes")
    lane = page.locator("section.lane[data-key='store:B']")
    expect(lane).to_contain_text("1 of 1 in use · 5 waiting")
    expect(lane.locator("ol li")).to_have_count(3)
    expect(lane).to_contain_text("and 2 more")
    lane.get_by_role("link", name="every one").click()
    expect(page).to_have_url(re.compile(r"/ui/lanes\?key=store%3AB$"))
    whole = page.locator("section.lane[data-key='store:B']")
    expect(whole.locator("ol li")).to_have_count(5)
    expect(whole.locator("ol li").last).to_contain_text("busy-5")
    expect(page.locator("section.lane[data-key='store:A']")).to_have_count(0)


def test_the_schedules_page_pauses_resumes_and_triggers_after_a_confirmation(
    console: Console, served: httpx.Client
) -> None:
    page = console.open("/ui/schedules")
    card = page.locator("section.schedule[data-schedule='nightly-sync']")
    expect(card.locator("ol.fires li")).to_have_count(3)
    card.get_by_role("button", name="Pause").click()
    page.locator("dialog").get_by_role("button", name="Pause").click()
    expect(card).to_contain_text("paused")
    expect(card).to_contain_text("none while paused")
    card.get_by_role("button", name="Resume").click()
    page.locator("dialog").get_by_role("button", name="Resume").click()
    expect(card.locator("ol.fires li")).to_have_count(3)
    card.get_by_role("button", name="Trigger now").click()
    page.locator("dialog").get_by_role("button", name="Trigger now").click()
    started = page.locator("#notes .note").filter(has_text="started sched:nightly-sync:")
    expect(started).to_be_visible()
    run_id = started.inner_text().removeprefix("started ")
    assert served.get(f"/runs/{run_id}").json()["workflow"] == "shop.sync"


def test_the_overview_and_the_engines_page_show_what_the_store_and_the_server_know(
    console: Console,
) -> None:
    page = console.open("/")
    expect(page.locator("#tiles")).to_contain_text("Failed")
    expect(page.locator("#throughput svg").first).to_have_attribute("role", "img")
    expect(page.locator("#busy")).to_contain_text("store:A")
    page.get_by_role("link", name="Engines & workers").click()
    expect(page.locator("#engine")).to_contain_text("shop.order@1")
    expect(page.locator("#workers")).to_contain_text("no remote worker can reach it")


# ---------------------------------------------------------------- the keyboard


def test_the_console_is_used_from_the_keyboard(console: Console) -> None:
    page = console.open("/ui/runs?id=order-done")
    expect(page.locator("#runs tr[data-item='order-done']")).to_be_visible()
    page.keyboard.press("Tab")
    expect(page.locator(".skip")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("main")).to_be_focused()
    link = page.get_by_role("link", name="order-done")
    for _ in range(40):  # through the filters, the chips and the toolbar to the run's link
        page.keyboard.press("Tab")
        if link.evaluate("node => node === document.activeElement"):
            break
    expect(link).to_be_focused()
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{console.base}/ui/runs/order-done")
    summary = page.locator("details.step[data-key='step-1'] > summary")
    summary.focus()
    page.keyboard.press("Enter")
    expect(page.locator("details.step[data-key='step-1']")).to_have_attribute("open", "")
    page.get_by_role("button", name="Export history (JSON)").focus()
    page.keyboard.press("Shift+Tab")
    expect(page.get_by_text("Fork…")).to_be_focused()
    page.keyboard.press("Shift+Tab")
    expect(page.get_by_text("Send update…")).to_be_focused()
    page.keyboard.press("Shift+Tab")
    expect(page.get_by_text("Send signal…")).to_be_focused()
