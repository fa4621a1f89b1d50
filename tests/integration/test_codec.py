"""Payloads encrypted at rest, on every store: what is written is never the plaintext, what is
read back is; keys rotate; a wrong key fails the run it belongs to, once, and the engine goes
on serving the others.

A marker (``SECRET-<hex>``) goes into every kind of payload a run has: its input and output, a
step's input, output and error message, a child's input and output, a signal, an event, an
update and its reply, a side effect's value. The raw SQLite file and the PostgreSQL rows are
then searched for it."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet as FernetKeys
from cryptography.fernet import InvalidToken

import runlane
from runlane import Engine, Retry, RunStatus
from runlane.codecs import Fernet
from runlane.errors import PayloadCodecError
from runlane.models import StepKind
from runlane.payloads import ENCODED
from runlane.stores.base import Store
from runlane.stores.encoded import unwrapped

from ..helpers import settle

MARK = f"SECRET-{uuid.uuid4().hex[:12]}"
attempts: dict[str, int] = {}


@runlane.step(name="codec.charge")
async def charge(order: dict[str, Any]) -> dict[str, Any]:
    return {"charged": order["card"]}


@runlane.step(name="codec.flaky", retry=Retry(max_attempts=2, backoff=1.0, jitter=0))
async def flaky(order: dict[str, Any]) -> str:
    attempts[order["card"]] = attempts.get(order["card"], 0) + 1
    if attempts[order["card"]] == 1:
        raise ValueError(f"card {order['card']} declined")
    return f"receipt for {order['card']}"


@runlane.step(name="codec.declined")
async def declined(order: dict[str, Any]) -> None:
    raise ValueError(f"card {order['card']} declined for good")


@runlane.workflow(name="codec.child")
async def child(ctx: runlane.Context, value: Any) -> Any:
    return {"echo": value}


@runlane.workflow(name="codec.order")
async def order(ctx: runlane.Context, order: dict[str, Any]) -> dict[str, Any]:
    charged = await ctx.step(charge, order)
    receipt = await ctx.step(flaky, order)
    with contextlib.suppress(ValueError):
        await ctx.step(declined, order)
    echoed = await ctx.child(child, order["card"])
    signal = await ctx.wait_for_signal("ship")
    event = await ctx.wait_for_event("paid")
    update = await ctx.wait_for_update("note")
    await ctx.reply(update, f"noted {update.payload}")
    effect = await ctx.side_effect(lambda: f"effect {order['card']}")
    return {"all": [charged, receipt, echoed, signal, event, effect]}


@runlane.workflow(name="codec.boom")
async def boom(ctx: runlane.Context, card: str) -> None:
    raise RuntimeError(f"card {card} refused")


WORKFLOWS = (order, child, boom)
STEPS = (charge, flaky, declined)


def keys(n: int = 1) -> list[bytes]:
    return [FernetKeys.generate_key() for _ in range(n)]


def engine_on(store: Store, clock: Any, codec: Any = None) -> Engine:
    return Engine(store, workflows=WORKFLOWS, steps=STEPS, clock=clock, drive=False, codec=codec)


async def run_everything(engine: Engine, clock: Any, run_id: str) -> runlane.Run:
    """The order workflow from start to end, every kind of payload carrying the marker."""
    await engine.start(order, {"card": MARK}, run_id)
    await engine.tick()
    clock.advance(2)  # the flaky step's retry
    for _ in range(3):
        await engine.tick()
    await engine.signal(run_id, "ship", f"signal {MARK}")
    await engine.tick()
    await engine.publish_event("paid", f"event {MARK}")
    await engine.tick()
    asking = asyncio.create_task(engine.update(run_id, "note", f"update {MARK}", timeout=10))
    while not await engine.store.list_signals(run_id):
        await asyncio.sleep(0.01)
    run = await settle(engine, run_id)
    assert await asyncio.wait_for(asking, 5) == f"noted update {MARK}"
    return run


def raw_text(kind: str, tmp_path: Path, pg_url: str) -> str:
    """Everything the store holds, as its database has it: the SQLite file's bytes (and its
    write-ahead log's), or every row of PostgreSQL's tables as text."""
    if kind == "sqlite":
        files = sorted(tmp_path.glob("runlane.db*"))
        assert files, "no SQLite file"
        return "".join(f.read_bytes().decode("latin-1") for f in files)
    import psycopg

    texts: list[str] = []
    with psycopg.connect(pg_url) as conn:
        for table in ("runs", "steps", "signals", "events", "schedules"):
            rows = conn.execute(f"SELECT t::text FROM runlane_{table} AS t").fetchall()
            texts.extend(row[0] for row in rows)
    return "\n".join(texts)


# ---------------------------------------------------------------- at rest


@pytest.mark.parametrize("store_kind", ["sqlite", "postgres"], indirect=True)
async def test_no_payload_is_stored_in_clear_and_every_one_reads_back(
    make_engine: Any, clock: Any, store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    nightly = runlane.Schedule("nightly", "codec.child", every=3600, input=f"nightly {MARK}")
    engine = await make_engine(*WORKFLOWS, steps=STEPS, schedules=[nightly], codec=Fernet(keys()))
    run = await run_everything(engine, clock, "o1")
    fired = await engine.schedules.trigger("nightly")
    assert (await settle(engine, fired.id)).output == {"echo": f"nightly {MARK}"}
    state = await engine.schedules.get("nightly")
    assert state is not None and state.schedule.input == f"nightly {MARK}"
    assert run.status == RunStatus.COMPLETED, run.error
    assert run.input == {"card": MARK}
    assert run.output["all"][0] == {"charged": MARK}
    assert run.output["all"][2] == {"echo": MARK}
    failed = await engine.start(boom, MARK, "b1")
    assert error_of(await settle(engine, failed.id))["message"] == f"card {MARK} refused"
    steps = await engine.list_steps("o1")
    failed_step = next(s for s in steps if s.name == "codec.declined")
    assert error_of(failed_step)["message"] == f"card {MARK} declined for good"

    pg_url = request.getfixturevalue("pg_url") if store_kind == "postgres" else ""
    stored = raw_text(store_kind, tmp_path, pg_url)
    assert ENCODED in stored
    assert MARK not in stored
    # What admission, indexing and operators read stays in clear.
    assert "codec.order" in stored and "ValueError" in stored and "RuntimeError" in stored


async def test_a_reply_is_found_by_its_update_id_under_the_codec(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(*WORKFLOWS, steps=STEPS, codec=Fernet(keys()))
    await run_everything(engine, clock, "o2")
    reply = next(s for s in await engine.list_steps("o2") if s.kind == StepKind.REPLY)
    raw = await unwrapped(engine.store).get_reply("o2", reply.input["update"])
    assert raw is not None and raw.input == reply.input  # a reference, in clear
    assert set(raw.output) == {ENCODED}


async def test_a_payload_may_not_look_encoded(make_engine: Any) -> None:
    engine = await make_engine(*WORKFLOWS, steps=STEPS)
    with pytest.raises(runlane.SerializationError, match=r"\$encoded"):
        await engine.start(order, {ENCODED: "not really"})


# ---------------------------------------------------------------- keys


async def test_rotated_keys_read_what_the_old_key_wrote_and_write_with_the_new_one(
    make_engine: Any, clock: Any
) -> None:
    old, new = keys(2)
    before = await make_engine(*WORKFLOWS, steps=STEPS, codec=Fernet([old]))
    await before.start(order, {"card": MARK}, "r1")
    await before.tick()
    after = await make_engine(*WORKFLOWS, steps=STEPS, codec=Fernet([new, old]))
    assert (await after.get_run("r1")).input == {"card": MARK}
    await after.signal("r1", "ship", "rotated")
    raw = await unwrapped(after.store).list_signals("r1")
    assert Fernet([new]).decode(_token(raw[0].payload))  # written under the new key only
    with pytest.raises(InvalidToken):
        Fernet([old]).decode(_token(raw[0].payload))
    clock.advance(2)
    for _ in range(4):
        await after.tick()
    steps = await after.list_steps("r1")
    assert [s.status for s in steps[:2]] == ["completed", "completed"]


def error_of(found: Any) -> dict[str, Any]:
    assert found.error is not None, found
    return dict(found.error)


async def settle_seen(engine: Engine, run_id: str) -> runlane.Run:
    """``settle``, reading the run as a view does: a payload the engine cannot decode stays as
    stored (the engine's own reads would raise)."""
    for _ in range(20):
        await engine.tick()
        run = await engine.read(lambda store: store.get_run(run_id))
        assert run is not None
        if run.is_terminal:
            return run
    raise AssertionError(f"{run_id} not terminal: {run}")


def _token(envelope: dict[str, str]) -> bytes:
    import base64

    return base64.b64decode(envelope[ENCODED])


async def test_a_store_without_the_codec_before_reads_as_it_was(
    make_engine: Any, clock: Any
) -> None:
    plain = await make_engine(*WORKFLOWS, steps=STEPS)
    await plain.start(order, {"card": MARK}, "p1")
    await plain.tick()
    encoding = await make_engine(*WORKFLOWS, steps=STEPS, codec=Fernet(keys()))
    clock.advance(2)
    for _ in range(3):
        await encoding.tick()
    await encoding.signal("p1", "ship", "now encrypted")
    await encoding.tick()
    steps = await encoding.list_steps("p1")
    assert steps[0].output == {"charged": MARK}  # written in clear, read as it is
    raw = await unwrapped(encoding.store).list_signals("p1")
    assert not raw or set(raw[0].payload) == {ENCODED}


# ---------------------------------------------------------------- a payload that does not decode


async def test_a_run_written_under_another_key_fails_once_and_the_engine_goes_on(
    make_engine: Any, clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    writer = await make_engine(*WORKFLOWS, steps=STEPS, codec=Fernet(keys()))
    await writer.start(boom, MARK, "other-key")
    wrong = await make_engine(*WORKFLOWS, steps=STEPS, codec=Fernet(keys()))
    failed = await settle_seen(wrong, "other-key")
    assert failed.status == RunStatus.FAILED
    assert error_of(failed)["type"] == "PayloadCodecError"
    assert "run 'other-key'" in error_of(failed)["message"]
    assert "InvalidToken" in error_of(failed)["message"]
    assert error_of(failed)["fatal"] is True
    assert await wrong.tick() == 0  # failed for good: nothing to claim again
    # The same engine serves its own runs all the while.
    await wrong.start(boom, "mine", "own-key")
    assert error_of(await settle(wrong, "own-key"))["message"] == "card mine refused"
    assert sum("run 'other-key'" in r.getMessage() for r in caplog.records) == 1
    # Its API refuses to hand out what it cannot read, naming the run; a view shows it stored.
    writer_run = await writer.start(boom, MARK, "unread")
    with pytest.raises(PayloadCodecError, match="run 'unread'"):
        await wrong.get_run(writer_run.id)
    seen = await wrong.read(lambda store: store.get_run("unread"))
    assert seen is not None and set(seen.input) == {ENCODED}


async def test_an_engine_without_a_codec_fails_an_encoded_run_and_shows_it_stored(
    make_engine: Any,
) -> None:
    writer = await make_engine(*WORKFLOWS, steps=STEPS, codec=Fernet(keys()))
    await writer.start(boom, MARK, "encoded")
    plain = await make_engine(*WORKFLOWS, steps=STEPS)
    assert set((await plain.get_run("encoded")).input) == {ENCODED}
    failed = await settle_seen(plain, "encoded")
    assert error_of(failed)["type"] == "PayloadCodecError"
    assert "this side has no codec" in error_of(failed)["message"]


async def test_a_failed_run_fixed_by_the_right_key_is_requeued_and_completes(
    make_engine: Any,
) -> None:
    right = keys()
    writer = await make_engine(child, codec=Fernet(right))
    await writer.start(child, MARK, "c1")
    wrong = await make_engine(child, codec=Fernet(keys()))
    assert (await settle_seen(wrong, "c1")).status == RunStatus.FAILED
    fixed = await make_engine(child, codec=Fernet([*keys(), *right]))
    await fixed.requeue("c1")
    done = await settle(fixed, "c1")
    assert done.status == RunStatus.COMPLETED and done.output == {"echo": MARK}
