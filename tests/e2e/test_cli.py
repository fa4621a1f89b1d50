"""The ``runlane`` command line against a real SQLite file, through click's CliRunner."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from runlane.cli import main

APP_SOURCE = textwrap.dedent(
    """
    import runlane

    @runlane.workflow(name="greet")
    async def greet(ctx, input):
        answer = await ctx.wait_for_signal("go")
        return {"hello": input["name"], "answer": answer}

    @runlane.step(name="explode", retry=runlane.Retry(max_attempts=2, backoff=0.01))
    def explode(input):
        raise ValueError("boom: " + input)

    @runlane.workflow(name="blow-up")
    async def blow_up(ctx, input):
        return await ctx.step(explode, input)

    @runlane.workflow(name="desk")
    async def desk(ctx, input):
        while True:
            update = await ctx.wait_for_update("ask")
            if update.payload == "bad":
                await ctx.reply(update, error="a bad question")
            else:
                await ctx.reply(update, {"echo": update.payload})

    def build():
        return runlane.Engine(
            store="sqlite:///{db}", workflows=[greet, blow_up, desk], drive=False
        )

    engine = build()
    driving = runlane.Engine(
        store="sqlite:///{db}", workflows=[greet, blow_up, desk], poll_interval=0.05
    )
    producer = runlane.Engine(
        store="sqlite:///{db}", workflows=[greet], drive=False, consumers="never",
        poll_interval=0.1,
    )
    not_an_engine = 42
    """
)


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'cli.db'}"


@pytest.fixture
def app(tmp_path: Path, db: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An importable module (unique name) defining the engine the CLI loads with --app."""
    module = f"cli_app_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(
        APP_SOURCE.replace("{db}", db.removeprefix("sqlite:///"))
    )
    monkeypatch.chdir(tmp_path)
    yield module


def engine_for(app: str) -> Any:
    import importlib
    import sys

    here = str(Path.cwd())
    sys.path.insert(0, here)
    importlib.invalidate_caches()
    try:
        return importlib.import_module(app).build()
    finally:
        sys.path.remove(here)


def run_in_engine(app: str, *calls: tuple[str, tuple[Any, ...]]) -> list[Any]:
    """Call engine methods in order on a fresh non-driving engine of the app."""

    async def go() -> list[Any]:
        async with engine_for(app) as engine:
            return [await getattr(engine, name)(*args) for name, args in calls]

    return asyncio.run(go())


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def waiting_run(app: str) -> str:
    """Run ``r1`` parked waiting for signal "go", and ``r2`` still pending."""
    run_in_engine(
        app,
        ("start", ("greet", {"name": "ada"}, "r1")),
        ("tick", ()),
        ("start", ("greet", {"name": "bob"}, "r2")),
    )
    return "r1"


def test_runs_list_shows_every_run_with_its_status(db: str, waiting_run: str) -> None:
    result = cli("runs", "list", "--db", db, "--json")
    assert result.exit_code == 0, result.output
    runs = {r["id"]: r["status"] for r in json.loads(result.output)}
    assert runs == {"r1": "suspended", "r2": "pending"}
    table = cli("runs", "list", "--db", db)
    assert table.exit_code == 0
    assert "r1" in table.output and "suspended" in table.output


def test_runs_list_reads_the_database_url_from_the_environment(
    db: str, waiting_run: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUNLANE_DATABASE_URL", db)
    result = cli("runs", "list", "--status", "pending", "--json")
    assert [r["id"] for r in json.loads(result.output)] == ["r2"]


def test_runs_show_lists_the_signal_wait(db: str, waiting_run: str) -> None:
    result = cli("runs", "show", "r1", "--db", db, "--json")
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["status"] == "suspended"
    assert body["created_at"].endswith("+00:00")
    assert [(s["kind"], s["name"], s["status"]) for s in body["steps"]] == [
        ("signal", "go", "pending")
    ]
    assert "go" in cli("runs", "show", "r1", "--db", db).output


def test_runs_signal_delivers_a_json_payload_that_completes_the_run(
    db: str, app: str, waiting_run: str
) -> None:
    result = cli("runs", "signal", "r1", "go", '{"yes": true}', "--db", db)
    assert result.exit_code == 0, result.output
    [_, run] = run_in_engine(app, ("tick", ()), ("get_run", ("r1",)))
    assert run.status == "completed"
    assert run.output == {"hello": "ada", "answer": {"yes": True}}


def test_runs_signal_rejects_bad_json_and_finished_runs(
    db: str, app: str, waiting_run: str
) -> None:
    bad = cli("runs", "signal", "r1", "go", "{nope", "--db", db)
    assert bad.exit_code == 2
    assert "not valid JSON" in bad.output
    cli("runs", "signal", "r1", "go", "--db", db)
    run_in_engine(app, ("tick", ()))
    late = cli("runs", "signal", "r1", "go", "--db", db)
    assert late.exit_code == 1
    assert "already completed" in late.output


@contextlib.contextmanager
def driving(app: str) -> Iterator[None]:
    """The app's driving engine, running on a thread (and loop) of its own meanwhile."""
    import importlib

    stop = threading.Event()
    ready = threading.Event()

    async def drive() -> None:
        async with importlib.import_module(app).driving:
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.02)

    sys.path.insert(0, str(Path.cwd()))
    thread = threading.Thread(target=asyncio.run, args=(drive(),))
    thread.start()
    try:
        assert ready.wait(10), "the driving engine did not start"
        yield
    finally:
        stop.set()
        thread.join(timeout=20)
        sys.path.remove(str(Path.cwd()))


def test_runs_update_prints_the_reply_and_exits_1_when_rejected_or_unanswered(
    db: str, app: str
) -> None:
    run_in_engine(app, ("start", ("desk", None, "d1")), ("start", ("greet", {"name": "x"}, "g")))
    with driving(app):
        answered = cli("runs", "update", "d1", "ask", '"hi"', "--db", db)
        assert answered.exit_code == 0, answered.output
        assert json.loads(answered.output) == {"echo": "hi"}
        scripted = cli("runs", "update", "d1", "ask", "1", "--db", db, "--json")
        assert json.loads(scripted.output) == {
            "run_id": "d1",
            "update": "ask",
            "reply": {"echo": 1},
        }
        rejected = cli("runs", "update", "d1", "ask", '"bad"', "--db", db)
        assert (rejected.exit_code, rejected.output.strip()) == (1, "Error: a bad question")
        unanswered = cli("runs", "update", "g", "ask", "--timeout", "0.3", "--db", db)
        assert unanswered.exit_code == 1 and "not answered within 0.3s" in unanswered.output
    missing = cli("runs", "update", "nope", "ask", "--db", db)
    assert missing.exit_code == 1 and "no run with id 'nope'" in missing.output
    bad = cli("runs", "update", "d1", "ask", "{nope", "--db", db)
    assert bad.exit_code == 2 and "not valid JSON" in bad.output
    never = cli("runs", "update", "d1", "ask", "--timeout", "0", "--db", db)
    assert never.exit_code == 2


def test_runs_cancel_then_retry_with_the_app(db: str, app: str, waiting_run: str) -> None:
    assert cli("runs", "cancel", "r2", "--db", db).output.strip() == "cancelled r2"
    again = cli("runs", "cancel", "r2", "--db", db)
    assert again.exit_code == 0
    assert "nothing to cancel" in again.output
    refused = cli("runs", "retry", "r2", "--db", db)
    assert refused.exit_code == 2
    assert "--app" in refused.output
    retried = cli("runs", "retry", "r2", "--app", f"{app}:engine")
    assert retried.exit_code == 0, retried.output
    assert "requeued r2 (pending)" in retried.output


def test_runs_pause_and_resume(db: str, waiting_run: str) -> None:
    assert cli("runs", "pause", "r2", "--db", db).output.strip() == "paused r2"
    shown = json.loads(cli("runs", "show", "r2", "--db", db, "--json").output)
    assert shown["status"] == "paused"
    again = cli("runs", "pause", "r2", "--db", db, "--json")
    assert again.exit_code == 0 and json.loads(again.output) == {"run_id": "r2", "paused": False}
    assert cli("runs", "resume", "r2", "--db", db).output.strip() == "resumed r2"
    assert "nothing to resume" in cli("runs", "resume", "r2", "--db", db).output
    for action in ("pause", "resume"):
        missing = cli("runs", action, "nosuch", "--db", db)
        assert missing.exit_code == 1 and "no run with id 'nosuch'" in missing.output


def test_runs_fork_with_the_app(db: str, app: str, waiting_run: str) -> None:
    refused = cli("runs", "fork", "r1", "--db", db)
    assert refused.exit_code == 2 and "--app" in refused.output
    forked = cli("runs", "fork", "r1", "--app", f"{app}:engine")
    assert forked.exit_code == 0, forked.output
    assert forked.output.strip() == "forked r1 at #1: r1.fork.1 (pending)"
    chosen = cli(
        "runs", "fork", "r1", "--from-seq", "1", "--id", "again", "--input", '{"name": "cy"}',
        "--app", f"{app}:engine", "--json",
    )  # fmt: skip
    body = json.loads(chosen.output)
    assert (body["id"], body["forked_from"], body["input"]) == ("again", ["r1", 1], {"name": "cy"})
    bad = cli("runs", "fork", "r1", "--from-seq", "0", "--app", f"{app}:engine")
    assert bad.exit_code == 2
    missing = cli("runs", "fork", "nosuch", "--app", f"{app}:engine")
    assert missing.exit_code == 1 and "no run with id 'nosuch'" in missing.output


def test_runs_start_takes_its_input_and_id_as_options(app: str, waiting_run: str) -> None:
    started = cli(
        "runs", "start", "greet", "--input", '{"name": "di"}', "--id", "s9",
        "--app", f"{app}:engine",
    )  # fmt: skip
    assert started.output.strip() == "started s9 (greet, pending)", started.output
    twice = cli("runs", "start", "greet", "{}", "--input", "{}", "--app", f"{app}:engine")
    assert twice.exit_code == 2 and "once" in twice.output


def test_runs_cancel_of_an_unknown_run_exits_1(db: str, waiting_run: str) -> None:
    result = cli("runs", "cancel", "nosuch", "--db", db)
    assert result.exit_code == 1
    assert "no run with id 'nosuch'" in result.output


def test_runs_start_starts_a_run_of_the_apps_workflow_with_a_json_input(
    db: str, app: str, waiting_run: str
) -> None:
    started = cli(
        "runs", "start", "greet", '{"name": "cy"}', "--run-id", "s1", "--tag", "cli",
        "--app", f"{app}:engine",
    )  # fmt: skip
    assert started.exit_code == 0, started.output
    assert started.output.strip() == "started s1 (greet, pending)"
    again = cli("runs", "start", "greet", '{"name": "cy"}', "--run-id", "s1", "--app",
                f"{app}:engine", "--json")  # fmt: skip
    assert again.exit_code == 0, again.output
    body = json.loads(again.output)
    assert (body["id"], body["created"], body["input"], body["tags"]) == (
        "s1", False, {"name": "cy"}, ["cli"],
    )  # fmt: skip
    [run] = run_in_engine(app, ("get_run", ("s1",)))
    assert run.input == {"name": "cy"}


def test_runs_are_started_with_attributes_and_listed_by_them(
    db: str, app: str, waiting_run: str
) -> None:
    for run_id, attrs in {
        "c1": ["customer=acme", "tier=2"],
        "c2": ["customer=acme", 'tier="2"'],
        "c3": ["customer=Acme Corp", "vip=true"],
    }.items():
        options = [arg for attr in attrs for arg in ("--attr", attr)]
        started = cli(
            "runs", "start", "greet", '{"name": "x"}', "--run-id", run_id, *options,
            "--app", f"{app}:engine", "--json",
        )  # fmt: skip
        assert started.exit_code == 0, started.output

    def listed(*attrs: str) -> list[str]:
        options = [arg for attr in attrs for arg in ("--attr", attr)]
        result = cli("runs", "list", "--db", db, *options, "--json")
        assert result.exit_code == 0, result.output
        return [run["id"] for run in json.loads(result.output)]

    assert listed("customer=acme") == ["c2", "c1"]
    assert listed("customer=acme", "tier=2") == ["c1"]
    assert listed('tier="2"') == ["c2"]
    assert listed("vip=true", "customer=Acme Corp") == ["c3"]
    assert listed("customer=nobody") == []
    [shown] = json.loads(cli("runs", "list", "--db", db, "--attr", "tier=2", "--json").output)
    assert shown["attributes"] == {"customer": "acme", "tier": 2}
    wide = CliRunner(env={"COLUMNS": "200"})
    table = wide.invoke(main, ["runs", "list", "--db", db, "--attr", "customer=acme"]).output
    assert 'customer=acme tier="2"' in table and "customer=acme tier=2" in table
    details = wide.invoke(main, ["runs", "show", "c3", "--db", db]).output
    assert "customer=Acme Corp vip=true" in details
    followed = cli(
        "runs", "list", "--db", db, "--attr", "tier=2", "--follow", "--polls", "1", "--json"
    )
    assert [json.loads(line)["id"] for line in followed.output.splitlines()] == ["c1"]


@pytest.mark.parametrize(
    ("attr", "message"),
    [("customer", "is not NAME=VALUE"), ("=acme", "non-empty"), ("n=1e400", "JSON cannot")],
)
def test_a_bad_attr_option_is_a_usage_error(
    db: str, waiting_run: str, attr: str, message: str
) -> None:
    result = cli("runs", "list", "--db", db, "--attr", attr)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("greet", "{nope"), 2, "not valid JSON"),
        (("greet",), 2, "start needs --app"),
        (("nosuch", "--app", "{app}:engine"), 1, "unknown workflow 'nosuch'"),
    ],
)
def test_runs_start_refuses_what_it_cannot_start(
    db: str, app: str, waiting_run: str, args: tuple[str, ...], code: int, message: str
) -> None:
    given = [arg.replace("{app}", app) for arg in args]
    result = cli("runs", "start", *given, "--db", db)
    assert result.exit_code == code, result.output
    assert message in " ".join(result.output.split())


def test_runs_show_prints_tracebacks_as_lines_and_each_failed_attempt(db: str, app: str) -> None:
    run_in_engine(app, ("start", ("blow-up", "x", "b1")), ("tick", ()))
    time.sleep(0.05)
    [_, run] = run_in_engine(app, ("tick", ()), ("get_run", ("b1",)))
    assert run.status == "failed"
    shown = cli("runs", "show", "b1", "--db", db)
    assert shown.exit_code == 0, shown.output
    assert "\\n" not in shown.output
    lines = [line.strip() for line in shown.output.splitlines()]
    assert "Traceback (most recent call last):" in lines
    assert "ValueError: boom: x" in lines
    attempts = [line for line in lines if line.startswith("attempt ")]
    assert [line.split(" (at ")[0] for line in attempts] == [
        f"attempt {n} of step #1 explode: ValueError: boom: x" for n in (1, 2)
    ]


def test_runs_show_of_an_unknown_run_fails_clearly(db: str, waiting_run: str) -> None:
    result = cli("runs", "show", "nope", "--db", db)
    assert result.exit_code == 1
    assert "no run with id 'nope'" in result.output


def test_commands_without_a_database_say_how_to_name_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RUNLANE_DATABASE_URL", raising=False)
    result = cli("runs", "list")
    assert result.exit_code == 2
    assert "--db" in result.output


def test_db_upgrade_on_sqlite_creates_the_schema(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    result = cli("db", "upgrade", url)
    assert result.exit_code == 0, result.output
    assert "up to date" in result.output
    assert (tmp_path / "fresh.db").exists()
    assert cli("runs", "list", "--db", url, "--json").output.strip() == "[]"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module_xyz:engine", "cannot import module 'no_such_module_xyz'"),
        ("json:no_such_attr", "has no attribute 'no_such_attr'"),
        ("json", "not of the form module:attribute"),
        ("json:dumps", "calling json:dumps() to build the engine failed"),
    ],
)
def test_a_bad_app_gives_a_clear_error(spec: str, message: str, db: str) -> None:
    result = cli("runs", "retry", "r1", "--db", db, "--app", spec)
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_an_app_that_is_not_an_engine_is_refused(app: str) -> None:
    result = cli("worker", f"{app}:not_an_engine")
    assert result.exit_code == 2
    assert "holds a int; expected runlane Engine or Worker objects" in " ".join(
        result.output.split()
    )


def test_an_app_given_as_a_factory_is_called(db: str, app: str, waiting_run: str) -> None:
    result = cli("runs", "list", "--app", f"{app}:build", "--json")
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.output)) == 2


def test_db_upgrade_on_postgresql_is_idempotent(pg_url: str) -> None:
    first = cli("db", "upgrade", pg_url)
    assert first.exit_code == 0, first.output
    assert "postgresql schema up to date (version" in first.output
    again = cli("db", "upgrade", pg_url)
    assert again.exit_code == 0, again.output
    assert again.output == first.output


@pytest.mark.parametrize("attribute", ["driving", "producer"])
def test_worker_runs_the_engine_until_sigterm_then_drains(
    db: str, app: str, attribute: str
) -> None:
    # "producer" is built drive=False, consumers="never": the worker command turns both on.
    run_in_engine(app, ("start", ("greet", {"name": "eve"}, "w1")), ("signal", ("w1", "go", 1)))
    worker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from runlane.cli import main; main()",
            "worker",
            f"{app}:{attribute}",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            [run] = run_in_engine(app, ("get_run", ("w1",)))
            if run.is_terminal:
                break
            time.sleep(0.1)
        assert run.status == "completed", f"worker did not finish w1: {run.status}"
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=20)
    assert worker.returncode == 0, err
    assert "stopped" in err


def test_worker_logs_each_run_that_fails(db: str, app: str) -> None:
    run_in_engine(app, ("start", ("blow-up", "x", "b1")))
    worker = subprocess.Popen(
        [sys.executable, "-c", "from runlane.cli import main; main()", "worker", f"{app}:driving"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            [run] = run_in_engine(app, ("get_run", ("b1",)))
            if run.is_terminal:
                break
            time.sleep(0.1)
        assert run.status == "failed"
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=20)
    assert worker.returncode == 0, err
    # Once, though other lines may name the run (a lease renewal late on a loaded machine).
    failed = [line for line in err.splitlines() if "run b1 (blow-up@1) failed" in line]
    assert len(failed) == 1, err
    assert "WARNING runlane.execution: run b1 (blow-up@1) failed: ValueError: boom: x" in failed[0]


def test_serve_refuses_a_public_address_without_a_token(
    app: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RUNLANE_API_TOKEN", raising=False)
    result = cli("serve", f"{app}:engine", "--host", "0.0.0.0")
    assert result.exit_code == 2
    assert "RUNLANE_API_TOKEN" in result.output


def test_serve_leaves_its_start_up_out_of_full_collections_once_the_app_is_built(
    app: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc

    import uvicorn

    seen: list[tuple[Any, int]] = []
    monkeypatch.setattr(
        uvicorn, "run", lambda served, **kw: seen.append((served, gc.get_freeze_count()))
    )
    try:
        result = cli("serve", f"{app}:engine")
    finally:
        gc.unfreeze()
    assert result.exit_code == 0, result.output
    [(served, frozen)] = seen
    assert type(served).__name__ == "Starlette"
    # The app, the engine and every module loaded are frozen: a full pass skips them.
    assert frozen > 10_000
    assert gc.get_freeze_count() == 0


def test_worker_leaves_its_start_up_out_of_full_collections_once_the_app_is_loaded(
    app: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc

    import runlane.cli

    frozen: list[int] = []

    def run_async(work: Any) -> None:
        work.close()  # never started: only what was frozen before it is looked at
        frozen.append(gc.get_freeze_count())

    monkeypatch.setattr(runlane.cli, "run_async", run_async)
    try:
        result = cli("worker", f"{app}:engine")
    finally:
        gc.unfreeze()
    assert result.exit_code == 0, result.output
    assert frozen[0] > 10_000


def test_serve_without_an_app_serves_the_store_db_names_and_executes_nothing(
    db: str, waiting_run: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runlane.cli import Source, served_engine

    monkeypatch.delenv("RUNLANE_DATABASE_URL", raising=False)
    refused = cli("serve")
    assert refused.exit_code == 2
    assert "serve needs an APP (module:attribute) or --db URL" in refused.output
    engine = served_engine(Source(db))
    assert (engine.drive, engine.consumers) == (False, "never")

    async def listed() -> list[str]:
        async with engine:
            return [run.id for run in await engine.list_runs()]

    assert sorted(asyncio.run(listed())) == ["r1", "r2"]


GATED_SOURCE = textwrap.dedent(
    """
    import runlane

    @runlane.workflow(name="sync", singleton=runlane.Singleton(key=lambda i: "store:" + i["store"]))
    async def sync(ctx, input):
        await ctx.wait_for_signal("done")

    engine = runlane.Engine(store="sqlite:///{db}", workflows=[sync], drive=False)
    """
)


def test_lanes_lists_holders_and_waiters_in_order(
    tmp_path: Path, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "gated_app.py").write_text(
        GATED_SOURCE.replace("{db}", db.removeprefix("sqlite:///"))
    )
    monkeypatch.chdir(tmp_path)

    async def go() -> None:
        async with engine_for_module("gated_app") as engine:
            for n in range(3):
                await engine.start("sync", {"store": "A"}, f"s{n}")
            await engine.run_pending()

    asyncio.run(go())
    result = cli("lanes", "--db", db, "--json")
    assert result.exit_code == 0, result.output
    [lane] = json.loads(result.output)
    assert (lane["kind"], lane["key"], lane["usage"], lane["limit"]) == (
        "singleton",
        "store:A",
        1,
        1,
    )
    assert [r["id"] for r in lane["waiters"]] == ["s1", "s2"]
    table = cli("lanes", "--db", db)
    assert "store:A" in table.output and "s1, s2" in table.output
    assert "no busy lanes" in cli("lanes", "--db", db, "--key", "store:B").output

    # The overview lists a lane's first three waiters and counts the rest; --key lists all.
    async def more() -> None:
        async with engine_for_module("gated_app") as engine:
            for n in range(3, 6):
                await engine.start("sync", {"store": "A"}, f"s{n}")

    asyncio.run(more())
    monkeypatch.setenv("COLUMNS", "200")  # one line per lane
    assert "s1, s2, s3 and 2 more" in cli("lanes", "--db", db).output
    keyed = cli("lanes", "--db", db, "--key", "store:A", "--json")
    assert [r["id"] for r in json.loads(keyed.output)[0]["waiters"]] == [
        f"s{n}" for n in range(1, 6)
    ]

    # The lane tag lists holder and waiters (not another key's run); the waiters read blocked,
    # the holder suspended.
    async def another_key() -> None:
        async with engine_for_module("gated_app") as engine:
            await engine.start("sync", {"store": "B"}, "b0")
            await engine.run_pending()

    asyncio.run(another_key())
    tagged = cli("runs", "list", "--db", db, "--tag", "singleton:store:A", "--json")
    assert tagged.exit_code == 0, tagged.output
    assert sorted((r["id"], r["status"]) for r in json.loads(tagged.output)) == [
        ("s0", "suspended"),
        *((f"s{n}", "blocked") for n in range(1, 6)),
    ]
    assert "blocked" in cli("runs", "list", "--db", db, "--tag", "singleton:store:A").output


LIMITED_SOURCE = textwrap.dedent(
    """
    import runlane

    @runlane.workflow(
        name="report", rate_limit=runlane.RateLimit(1, 3600, on_limit="delay")
    )
    async def report(ctx, input):
        return input

    @runlane.workflow(
        name="reindex", debounce=runlane.Debounce(key=lambda i: i["doc"], period=600)
    )
    async def reindex(ctx, input):
        return input

    engine = runlane.Engine(
        store="sqlite:///{db}", workflows=[report, reindex], drive=False
    )
    """
)


def test_lanes_lists_a_throttles_window_and_a_debounces_run(
    tmp_path: Path, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "limited_app.py").write_text(
        LIMITED_SOURCE.replace("{db}", db.removeprefix("sqlite:///"))
    )
    monkeypatch.chdir(tmp_path)

    async def go() -> None:
        async with engine_for_module("limited_app") as engine:
            await engine.start("report", 1, "first")
            await engine.start("report", 2, "throttled")
            await engine.start("reindex", {"doc": "readme"}, "doc-1")
            await engine.start("reindex", {"doc": "readme", "again": True}, "doc-2")

    asyncio.run(go())
    result = cli("lanes", "--db", db, "--json")
    assert result.exit_code == 0, result.output
    rate, debounce = json.loads(result.output)
    assert (rate["kind"], rate["key"], rate["workflow"], rate["used"], rate["limit"]) == (
        "rate_limit",
        None,
        "report",
        1,
        1,
    )
    assert [r["id"] for r in rate["counted"]] == ["first"]
    assert [r["id"] for r in rate["held"]] == ["throttled"]
    # The next start fits once the throttled one, counted an hour from now, leaves the window.
    assert rate["resets_at"] == rate["clears_at"] > rate["held"][0]["counted_at"]
    assert (debounce["kind"], debounce["key"], debounce["run"]["id"]) == (
        "debounce",
        "readme",
        "doc-1",
    )
    assert debounce["fires_at"] > debounce["first_at"]
    table = CliRunner().invoke(main, ["lanes", "--db", db], env={"COLUMNS": "200"}).output
    assert "rate limit" in table and "1/1 per 3600 s" in table and "held: throttled" in table
    assert "debounce" in table and "readme" in table and "doc-1" in table
    only = json.loads(cli("lanes", "--db", db, "--json", "--key", "report").output)
    assert [lane["kind"] for lane in only] == ["rate_limit"]


def engine_for_module(name: str) -> Any:
    import importlib

    sys.path.insert(0, str(Path.cwd()))
    try:
        return importlib.import_module(name).engine
    finally:
        sys.path.pop(0)


def test_runs_list_follow_prints_runs_as_they_change(db: str, waiting_run: str) -> None:
    result = cli(
        "runs", "list", "--db", db, "--follow", "--json", "--interval", "0", "--polls", "2"
    )
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert [(r["id"], r["status"]) for r in lines] == [("r1", "suspended"), ("r2", "pending")]


def test_every_runs_command_answers_json(db: str, app: str, waiting_run: str) -> None:
    cancelled = cli("runs", "cancel", "r2", "--db", db, "--json")
    assert json.loads(cancelled.output) == {"run_id": "r2", "cancelled": True}
    signalled = cli("runs", "signal", "r1", "go", "1", "--db", db, "--json")
    assert json.loads(signalled.output) == {"run_id": "r1", "signal": "go"}
    retried = cli("runs", "retry", "r2", "--app", f"{app}:engine", "--json")
    assert json.loads(retried.output)["status"] == "pending"


def test_a_bad_status_is_a_usage_error_in_one_line(db: str, waiting_run: str) -> None:
    result = cli("runs", "list", "--db", db, "--status", "bogus")
    assert result.exit_code == 2
    assert "'bogus' is not one of" in result.output
    assert "Traceback" not in result.output


def test_a_refused_connection_is_one_line_and_exit_1() -> None:
    result = cli("runs", "list", "--db", "postgresql://app:s3cret@127.0.0.1:1/x?connect_timeout=2")
    assert result.exit_code == 1
    [line] = result.output.strip().splitlines()
    assert line.startswith("Error: the store is unavailable") and "s3cret" not in line


def test_read_commands_open_existing_sqlite_databases_only(tmp_path: Path) -> None:
    for url in (f"sqlite:///{tmp_path}/typo.db", f"sqlite:///{tmp_path}/missing/runlane.db"):
        result = cli("runs", "list", "--db", url)
        assert result.exit_code == 1
        [line] = result.output.strip().splitlines()
        assert f"no SQLite database at {url.removeprefix('sqlite:///')}" in line
        assert "runlane db upgrade" in line
    assert not (tmp_path / "typo.db").exists()


def test_db_upgrade_without_a_url_names_its_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUNLANE_DATABASE_URL", raising=False)
    result = cli("db", "upgrade")
    assert result.exit_code == 2
    assert "pass the URL or set RUNLANE_DATABASE_URL" in result.output
    assert "--db" not in result.output


def test_help_says_what_the_exit_codes_mean() -> None:
    text = " ".join(cli("--help").output.split())
    assert "Exit codes: 0 done; 1 failed" in text and "2 usage" in text
    assert "Needs --app" in cli("runs", "retry", "--help").output


def test_schedules_are_listed_paused_resumed_and_triggered_from_the_shell(
    db: str, app: str
) -> None:
    async def create() -> None:
        from runlane import Schedule

        async with engine_for(app) as engine:
            await engine.schedules.upsert(
                Schedule("hourly", "greet", every=3600, input={"name": "s"})
            )

    asyncio.run(create())
    listed = cli("schedules", "list", "--db", db, "--json")
    assert listed.exit_code == 0, listed.output
    [schedule] = json.loads(listed.output)
    assert (schedule["id"], schedule["workflow"], schedule["paused"]) == ("hourly", "greet", False)
    table = cli("schedules", "list", "--db", db)
    assert "hourly" in table.output and "every 3600 s" in table.output
    paused = cli("schedules", "pause", "hourly", "--db", db, "--json")
    assert json.loads(paused.output)["paused"] is True
    assert "paused" in cli("schedules", "list", "--db", db).output
    resumed = cli("schedules", "resume", "hourly", "--db", db)
    assert resumed.exit_code == 0 and "resumed hourly" in resumed.output
    needs_app = cli("schedules", "trigger", "hourly", "--db", db)
    assert needs_app.exit_code == 2 and "--app" in needs_app.output
    assert json.loads(cli("schedules", "list", "--db", db, "--json").output)[0]["paused"] is False
    triggered = cli("schedules", "trigger", "hourly", "--app", f"{app}:engine", "--json")
    assert triggered.exit_code == 0, triggered.output
    run_id = json.loads(triggered.output)["id"]
    assert run_id.startswith("sched:hourly:manual:")

    async def stored() -> Any:
        async with engine_for(app) as engine:
            return await engine.get_run(run_id)

    run = asyncio.run(stored())
    assert run is not None and run.input == {"name": "s"} and "schedule:hourly" in run.tags
    missing = cli("schedules", "pause", "nope", "--db", db)
    assert missing.exit_code == 1 and "no schedule with id 'nope'" in missing.output


def test_runs_prune_deletes_settled_runs_and_events_older_than_asked_and_keeps_the_rest(
    db: str, app: str, waiting_run: str
) -> None:
    cli("runs", "signal", "r1", "go", "--db", db)
    run_in_engine(app, ("tick", ()), ("publish_event", ("ping",)), ("publish_event", ("pong",)))
    kept = cli("runs", "prune", "--older-than", "1h", "--db", db)
    assert kept.exit_code == 0, kept.output
    assert kept.output.strip() == "deleted 0 settled runs and 0 events older than 1h"
    pruned = cli("runs", "prune", "--older-than", "0s", "--db", db, "--json")
    # The newest event stays: it carries the log's latest seq.
    assert json.loads(pruned.output) == {
        "deleted": 1,
        "events_deleted": 1,
        "older_than_seconds": 0.0,
    }
    listed = cli("runs", "list", "--db", db, "--json")
    assert [r["id"] for r in json.loads(listed.output)] == ["r2"]


def test_runs_prune_refuses_a_duration_it_cannot_read(db: str, waiting_run: str) -> None:
    result = cli("runs", "prune", "--older-than", "soon", "--db", db)
    assert result.exit_code == 2
    assert "no duration" in result.output


def test_every_action_is_audited_in_the_os_users_name_and_runlane_audit_lists_it(
    db: str, app: str, waiting_run: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("getpass.getuser", lambda: "ada")
    assert cli("runs", "signal", "r1", "go", '"yes"', "--db", db).exit_code == 0
    assert cli("runs", "cancel", "nosuch", "--db", db).exit_code == 1
    started = cli("runs", "start", "greet", '{"name": "cy"}', "--app", f"{app}:engine")
    assert started.exit_code == 0, started.output
    listed = json.loads(cli("audit", "--db", db, "--json").output)
    new_run = listed[0]["run_id"]
    assert [(e["actor"], e["source"], e["action"], e["run_id"], e["detail"], e["outcome"])
            for e in listed] == [
        ("ada", "cli", "start", new_run, None, "ok"),
        ("ada", "cli", "cancel", "nosuch", None, "RunNotFoundError"),
        ("ada", "cli", "signal", "r1", "go", "ok"),
    ]  # fmt: skip
    table = cli("audit", "--db", db, "--limit", "1")
    assert table.exit_code == 0 and "start" in table.output and "signal" not in table.output
    older = json.loads(cli("audit", "--db", db, "--json", "--before", str(listed[1]["id"])).output)
    assert [e["action"] for e in older] == ["signal"]
