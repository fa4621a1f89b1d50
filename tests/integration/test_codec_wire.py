"""Payloads encrypted on the wire: tasks, results, workflow tasks and decisions between an engine
and its workers carry no plaintext, as Redis itself sees them (its MONITOR feed), and a worker
with another key fails what it cannot read, naming the run, instead of running it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from cryptography.fernet import Fernet as FernetKeys

import runlane
from runlane import Engine, RemoteWorkflow, RunStatus
from runlane.codecs import Fernet
from runlane.payloads import ENCODED
from runlane.remote.worker import Worker
from runlane.stores.base import Store
from runlane.transports import InProcessTransport, RedisTransport, Transport

REDIS_URL = os.environ.get("RUNLANE_REDIS_URL", "redis://127.0.0.1:6379/0")
MARK = f"SECRET-{uuid.uuid4().hex[:12]}"
FAST: dict[str, Any] = {"poll_timeout": 0.1, "heartbeat_interval": 0.1}


@pytest.fixture
def store_kind() -> str:
    return "postgres"


@runlane.step(name="wire.seal", group="wire-steps")
async def seal(text: str) -> dict[str, str]:
    return {"sealed": text}


@runlane.step(name="wire.local")
async def local(text: str) -> str:
    return f"local {text}"


@runlane.workflow(name="wire.turns")
async def turns(ctx: runlane.Context, text: str) -> dict[str, Any]:
    here = await ctx.step(local, text)
    there = await ctx.step("wire.seal", text, group="wire-steps")
    heard = await ctx.wait_for_signal("go")
    return {"here": here, "there": there, "heard": heard}


def key() -> Fernet:
    return Fernet([FernetKeys.generate_key()])


@contextlib.asynccontextmanager
async def monitored(prefix: str) -> AsyncIterator[list[str]]:
    """Every command Redis runs on this test's keys and channels, as Redis received it."""
    from redis.asyncio import Redis

    client = Redis.from_url(REDIS_URL)
    seen: list[str] = []
    ready = asyncio.Event()

    async def listen() -> None:
        async with client.monitor() as monitor:
            ready.set()
            async for command in monitor.listen():
                if prefix in command["command"]:
                    seen.append(command["command"])

    listening = asyncio.create_task(listen())
    await asyncio.wait_for(ready.wait(), 5)
    await asyncio.sleep(0.1)  # MONITOR is on once Redis answered it
    try:
        yield seen
    finally:
        listening.cancel()
        await asyncio.gather(listening, return_exceptions=True)
        await client.aclose()


@contextlib.asynccontextmanager
async def crew(transport: Transport, codec: Any) -> AsyncIterator[None]:
    workers = [
        Worker("wire-wf", transport, workflows=[turns], steps=[local], codec=codec, **FAST),
        Worker("wire-steps", transport, steps=[seal], codec=codec, **FAST),
    ]
    running = [asyncio.create_task(w.run()) for w in workers]
    try:
        yield
    finally:
        for worker in workers:
            await worker.stop()
        await asyncio.gather(*running, return_exceptions=True)


async def test_no_payload_crosses_redis_in_clear(store: Store) -> None:
    prefix = f"rl-codec-{uuid.uuid4().hex[:8]}"
    codec = key()
    transport = RedisTransport(REDIS_URL, prefix=prefix)
    engine = Engine(
        store,
        transport=transport,
        poll_interval=0.05,
        remote_workflows=[RemoteWorkflow("wire.turns", group="wire-wf")],
        codec=codec,
    )
    try:
        async with monitored(prefix) as seen, crew(transport, codec), engine:
            await engine.start("wire.turns", MARK, run_id="w1")
            await until_waiting(engine, "w1")
            await engine.signal("w1", "go", f"signal {MARK}")
            done = await engine.wait_for_run("w1", timeout=30)
    finally:
        await transport.purge()
        await transport.close()
    assert done.status == RunStatus.COMPLETED, done.error
    assert done.output == {
        "here": f"local {MARK}",
        "there": {"sealed": MARK},
        "heard": f"signal {MARK}",
    }
    sent = [c for c in seen if any(q in c for q in (":tasks:", ":results", ":decisions:"))]
    assert any("wire.seal" in c for c in sent), "no step task seen on Redis"
    assert any('"kind":"decision"' in c.replace(" ", "") for c in sent), "no decision seen"
    assert all(MARK not in c for c in seen), [c for c in seen if MARK in c][:1]
    assert sum(ENCODED in c for c in sent) >= 3


def error_of(found: Any) -> dict[str, Any]:
    assert found.error is not None, found
    return dict(found.error)


async def until_waiting(engine: Engine, run_id: str) -> None:
    for _ in range(300):
        steps = await engine.list_steps(run_id)
        if any(s.kind == "signal" and s.status == "pending" for s in steps):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{run_id} never waited for its signal: {await engine.list_steps(run_id)}")


async def test_a_worker_with_another_key_fails_the_step_naming_the_run(store: Store) -> None:
    transport = InProcessTransport()
    engine = Engine(
        store,
        transport=transport,
        workflows=[turns],
        steps=[local],
        poll_interval=0.05,
        codec=key(),
    )
    async with crew(transport, key()), engine:
        await engine.start(turns, MARK, run_id="k1")
        done = await engine.wait_for_run("k1", timeout=30)
    assert done.status == RunStatus.FAILED
    assert error_of(done)["type"] == "PayloadCodecError"
    assert "run 'k1'" in error_of(done)["message"] and "InvalidToken" in error_of(done)["message"]
    step = (await engine.list_steps("k1"))[1]
    assert step.status == "failed" and step.attempts == 1  # fatal: never retried


async def test_an_engine_with_another_key_fails_the_turn_a_worker_decided(store: Store) -> None:
    transport = InProcessTransport()
    engine = Engine(
        store,
        transport=transport,
        poll_interval=0.05,
        remote_workflows=[RemoteWorkflow("wire.turns", group="wire-wf")],
        codec=key(),
    )
    async with crew(transport, key()), engine:
        await engine.start("wire.turns", MARK, run_id="k2")
        done = await engine.wait_for_run("k2", timeout=30)
    assert done.status == RunStatus.FAILED
    assert error_of(done)["type"] == "PayloadCodecError"
    assert "run 'k2'" in error_of(done)["message"]
