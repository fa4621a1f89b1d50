"""Replay before you deploy: a run's history exported as JSON, replayed in a test with
``runlane.testing.replay``, and every stored run of an app replayed by ``runlane replay``."""

from __future__ import annotations

import asyncio
import importlib
import json
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import runlane
from runlane import Engine, NonDeterminismError
from runlane.cli import main
from runlane.history import history_doc
from runlane.testing import ManualClock, replay
from tests.unit.test_protocol_schemas import validator

executed: list[str] = []


@runlane.step(name="replay.charge")
def charge(order: str) -> str:
    executed.append(order)
    return f"charged {order}"


@runlane.step(name="replay.notify")
def notify(order: str) -> str:
    executed.append(f"notify {order}")
    return "sent"


@runlane.workflow(name="checkout")
async def checkout(ctx: runlane.Context, order: str) -> str:
    stamp = ctx.now()
    await ctx.step(charge, order)
    note = await ctx.side_effect(lambda: f"note {order}")
    await ctx.wait_for_signal("ship")
    return f"{stamp.year} {note}"


@runlane.workflow(name="checkout")
async def checkout_patched(ctx: runlane.Context, order: str) -> str:
    stamp = ctx.now()
    await ctx.step(charge, order)
    if ctx.patched("notify"):
        await ctx.step(notify, order)
    note = await ctx.side_effect(lambda: f"note {order}")
    await ctx.wait_for_signal("ship")
    return f"{stamp.year} {note}"


@runlane.workflow(name="checkout")
async def checkout_broken(ctx: runlane.Context, order: str) -> str:
    await ctx.step(charge, order)  # the recorded ``now`` is gone: op #1 differs
    return "done"


@runlane.workflow(name="checkout")
async def checkout_short(ctx: runlane.Context, order: str) -> str:
    ctx.now()
    await ctx.step(charge, order)
    return "ends before its history does"


async def a_history(tmp_path: Path, *, signal: bool) -> dict[str, Any]:
    """The exported history of a run of ``checkout``: waiting for its signal, or completed."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    engine = Engine(
        runlane.stores.SqliteStore(tmp_path / "h.db"),
        workflows=[checkout],
        drive=False,
        clock=ManualClock(),
    )
    async with engine:
        await engine.start(checkout, "o-1", run_id="o-1")
        await engine.tick()
        if signal:
            await engine.signal("o-1", "ship", "now")
            await engine.tick()
        run = await engine.get_run("o-1")
        assert run is not None
        signals = await engine.read(lambda store: store.list_signals("o-1"))
        return history_doc(run, await engine.list_steps("o-1"), signals)


@pytest.fixture(autouse=True)
def _forget() -> None:
    executed.clear()


async def test_an_exported_history_replays_against_its_own_code_and_a_patched_one(
    tmp_path: Path,
) -> None:
    for signal in (False, True):
        doc = await a_history(tmp_path / str(signal), signal=signal)
        executed.clear()
        replay(checkout, doc)
        replay(checkout_patched, json.dumps(doc))  # an old history takes the old branch
    assert executed == []  # a replay runs no step and calls no side effect


async def test_an_exported_history_follows_its_json_schema(tmp_path: Path) -> None:
    for signal in (False, True):
        doc = await a_history(tmp_path / str(signal), signal=signal)
        validator("history").validate(json.loads(json.dumps(doc)))


async def test_a_history_the_code_cannot_follow_is_named_where_it_diverges(
    tmp_path: Path,
) -> None:
    doc = await a_history(tmp_path, signal=True)
    with pytest.raises(NonDeterminismError) as diverged:
        replay(checkout_broken, doc)
    assert (diverged.value.seq, diverged.value.recorded, diverged.value.new) == (
        1,
        "now 'now'",
        "step 'replay.charge'",
    )
    with pytest.raises(NonDeterminismError) as ended:
        replay(checkout_short, doc)
    assert ended.value.seq == 3 and ended.value.new == "nothing: the workflow ended"


async def test_a_history_with_a_patch_the_code_lacks_does_not_replay(tmp_path: Path) -> None:
    """Code to deploy that lacks a patch live runs took (a roll back too far) is reported."""
    doc = await a_history(tmp_path, signal=False)
    patched = {**doc, "history": [dict(r) for r in doc["history"]]}
    charged = patched["history"][1]
    patched["history"][2:2] = [
        {**charged, "kind": "patch", "name": "notify", "input": None, "output": None},
        {**charged, "name": "replay.notify", "output": "sent"},
    ]
    for i, record in enumerate(patched["history"], start=1):
        record["seq"] = i
    replay(checkout_patched, patched)
    with pytest.raises(NonDeterminismError) as diverged:
        replay(checkout, patched)
    assert (diverged.value.seq, diverged.value.recorded) == (3, "patch 'notify'")


def test_replay_reads_a_history_file_and_refuses_what_is_not_one(tmp_path: Path) -> None:
    doc = asyncio.run(a_history(tmp_path, signal=False))
    path = tmp_path / "o-1.json"
    path.write_text(json.dumps(doc))
    replay(checkout, path)  # synchronous, outside any event loop too
    with pytest.raises(ValueError, match="not a runlane history"):
        replay(checkout, {"format": "something else"})
    with pytest.raises(ValueError, match="of workflow 'checkout', not 'other'"):

        @runlane.workflow(name="other")
        async def other(ctx: runlane.Context, _: Any) -> None: ...

        replay(other, doc)
    broken = {**doc, "history": [{"seq": 0, "kind": "step"}]}
    with pytest.raises(ValueError, match="seq must be a positive integer"):
        replay(checkout, broken)


# ---------------------------------------------------------------- the command line

APP = textwrap.dedent(
    """
    import runlane
    from tests.integration.test_replay import {body}

    engine = runlane.Engine(store="sqlite:///{db}", workflows=[{body}], drive=False)
    """
)


@pytest.fixture
def apps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Modules each defining an engine on one SQLite file, with one version of the code."""
    monkeypatch.syspath_prepend(str(tmp_path))
    db = tmp_path / "cli.db"

    def app(body: str) -> str:
        module = f"replay_app_{uuid.uuid4().hex[:8]}"
        (tmp_path / f"{module}.py").write_text(APP.format(body=body, db=db))
        return f"{module}:engine"

    yield app


def test_runlane_replay_exits_1_naming_each_run_the_new_code_cannot_replay(apps: Any) -> None:
    old = apps("checkout")
    runner = CliRunner()
    _start_and_drive(old, ["a", "b"])
    fine = runner.invoke(main, ["replay", apps("checkout_patched")])
    assert fine.exit_code == 0, fine.output
    assert "2 runs checked: all replay with this code" in fine.output
    broken = runner.invoke(main, ["replay", apps("checkout_broken"), "--json"])
    assert broken.exit_code == 1
    report = json.loads(broken.stdout)
    assert report["checked"] == 2
    assert sorted((d["run_id"], d["seq"], d["recorded"], d["new"]) for d in report["diverged"]) == [
        ("a", 1, "now 'now'", "step 'replay.charge'"),
        ("b", 1, "now 'now'", "step 'replay.charge'"),
    ]
    exported = runner.invoke(main, ["runs", "export", "a", "--app", old])
    assert exported.exit_code == 0
    doc = json.loads(exported.stdout)
    assert [r["kind"] for r in doc["history"]] == ["now", "step", "side_effect", "signal"]
    replay(checkout, doc)
    missing = runner.invoke(main, ["runs", "export", "nope", "--app", old])
    assert missing.exit_code == 1 and "no run with id 'nope'" in missing.output


def _start_and_drive(app: str, orders: list[str]) -> None:
    """Start a run of each order with the app's engine; one pass takes each to its wait."""
    module, _, name = app.partition(":")
    engine = getattr(importlib.import_module(module), name)

    async def go() -> None:
        async with engine:
            for order in orders:
                await engine.start("checkout", order, run_id=order)
            await engine.tick()

    asyncio.run(go())
