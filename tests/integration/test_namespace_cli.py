"""The command line and namespaces: a command with ``--app`` acts as the app's engine (its
namespace and scope), one with ``--db`` alone as ``--namespace NS [--scope-reads]`` says."""

from __future__ import annotations

import asyncio
import json
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import runlane
from runlane.cli import Source, main, served_engine
from runlane.stores.sqlite import SqliteStore


@runlane.workflow(name="sync", singleton=runlane.Singleton(key=lambda i: f"store:{i['store']}"))
async def sync(ctx: runlane.Context, input: dict[str, Any]) -> Any:
    if await ctx.wait_for_signal("go") == "fail":
        raise runlane.FatalError("asked to fail")
    return "done"


APP = textwrap.dedent(
    """
    import runlane
    from tests.integration.test_namespace_cli import sync

    engine = runlane.Engine(
        store="sqlite:///{db}", workflows=[sync], namespace="eu", scope_reads=True, drive=False
    )
    """
)


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A store with runs of ``eu`` (e1) and of ``us`` (u1 waiting, u2 failed), each started
    by an engine fenced to its namespace, on the same key."""
    path = tmp_path / "namespaces.db"

    async def fill() -> None:
        for namespace, runs in (("eu", ["e1"]), ("us", ["u1", "u2"])):
            engine = runlane.Engine(
                SqliteStore(path), workflows=[sync], namespace=namespace, scope_reads=True
            )
            async with engine:
                for run_id in runs:
                    await engine.start(sync, {"store": run_id}, run_id)
                await engine.tick()
                if "u2" in runs:
                    await engine.signal("u2", "go", "fail")
                    await engine.tick()

    asyncio.run(fill())
    return f"sqlite:///{path}"


@pytest.fixture
def app(db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A module whose engine is fenced to ``eu``, on the same store."""
    monkeypatch.syspath_prepend(str(tmp_path))
    module = f"eu_app_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(APP.format(db=db.removeprefix("sqlite:///")))
    yield f"{module}:engine"


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def listed(result: Result) -> list[str]:
    assert result.exit_code == 0, result.output
    return sorted(run["id"] for run in json.loads(result.stdout))


def test_db_commands_read_every_namespace_unless_fenced_to_one(db: str) -> None:
    eu = ("--db", db, "--namespace", "eu", "--scope-reads")
    assert listed(cli("runs", "list", "--db", db, "--json")) == ["e1", "u1", "u2"]
    assert listed(cli("runs", "list", *eu, "--json")) == ["e1"]
    # A namespace without --scope-reads stamps starts only: reads stay shared.
    assert listed(cli("runs", "list", "--db", db, "--namespace", "eu", "--json")) == [
        "e1",
        "u1",
        "u2",
    ]
    lanes = json.loads(cli("lanes", *eu, "--json").stdout)
    assert [(x["key"], x["namespace"]) for x in lanes] == [("store:e1", "eu")]
    every = json.loads(cli("lanes", "--db", db, "--json").stdout)
    assert sorted((x["key"], x["namespace"]) for x in every) == [
        ("store:e1", "eu"),
        ("store:u1", "us"),
    ]
    shown = cli("runs", "show", "e1", *eu, "--json")
    assert shown.exit_code == 0 and json.loads(shown.stdout)["namespace"] == "eu"


def test_db_commands_fenced_to_a_namespace_find_no_run_of_another(db: str) -> None:
    eu = ("--db", db, "--namespace", "eu", "--scope-reads")
    for command in (
        ("runs", "show", "u1", *eu),
        ("runs", "export", "u1", *eu),
        ("runs", "cancel", "u1", *eu),
        ("runs", "signal", "u1", "go", '"from eu"', *eu),
    ):
        result = cli(*command)
        assert result.exit_code == 1, (command, result.output)
        assert "no run with id 'u1'" in result.output
    assert listed(cli("runs", "list", "--db", db, "--status", "suspended", "--json")) == [
        "e1",
        "u1",
    ]


def test_app_commands_use_the_app_engine_namespace_and_scope(app: str, db: str) -> None:
    assert listed(cli("runs", "list", "--app", app, "--json")) == ["e1"]
    retried = cli("runs", "retry", "u2", "--app", app)
    assert retried.exit_code == 1 and "no run with id 'u2'" in retried.output
    taken = cli("runs", "start", "sync", '{"store": "x"}', "--run-id", "u1", "--app", app)
    assert taken.exit_code == 1 and "no run with id 'u1'" in taken.output
    started = cli(
        "runs", "start", "sync", '{"store": "x"}', "--run-id", "e2", "--app", app, "--json"
    )
    assert started.exit_code == 0 and json.loads(started.stdout)["namespace"] == "eu"


def test_namespace_options_go_with_db_alone(app: str, db: str) -> None:
    both = cli("runs", "list", "--app", app, "--namespace", "us")
    assert both.exit_code == 2 and "go with --db alone" in both.output
    unfenced = cli("lanes", "--db", db, "--scope-reads")
    assert unfenced.exit_code == 2 and "give --namespace NS" in unfenced.output
    served = cli("serve", app, "--scope-reads")
    assert served.exit_code == 2 and "go with --db alone" in served.output
    assert "--scope-reads" in cli("runs", "list", "--help").output


def test_serve_serves_the_namespace_of_its_engine(app: str, db: str) -> None:
    for served in (served_engine(Source(None, app)), served_engine(Source(db, None, "eu", True))):
        assert (served.namespace, served.scope_reads) == ("eu", True)

        async def runs(engine: runlane.Engine = served) -> list[str]:
            async with engine:
                return [run.id for run in await engine.list_runs()]

        assert asyncio.run(runs()) == ["e1"]
