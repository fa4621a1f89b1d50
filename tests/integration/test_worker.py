"""A Worker on every transport: executes its group's tasks, beats, reports errors, drains."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

import runlane
from runlane.remote.worker import Worker
from runlane.transports import InProcessTransport, Transport
from tests.contract import test_transport_contract as contract

# The contract suite's fixtures: every transport, a throw-away prefix per test.
transport_kind = contract.transport_kind
make_transport = contract.make_transport
transport = contract.transport

FAST: dict[str, Any] = {"poll_timeout": 0.1, "heartbeat_interval": 0.1}


@runlane.step(name="math.add", group="math")
def add(input: dict[str, int]) -> int:
    return input["a"] + input["b"]


@runlane.step(name="math.double", group="math")
async def double(input: int) -> int:
    await asyncio.sleep(0)
    return input * 2


@runlane.step(name="math.slow", group="math")
async def slow(input: float) -> str:
    await asyncio.sleep(input)
    return "done"


@runlane.step(name="math.broken", group="math")
def broken(input: Any) -> None:
    raise ValueError(f"cannot use {input!r}")


@runlane.step(name="math.opaque", group="math")
def opaque() -> object:
    return object()


STEPS = [add, double, slow, broken, opaque]


def task(name: str, input: Any, run_id: str = "r1", seq: int = 1) -> dict[str, Any]:
    return {
        "step_id": f"{run_id}:{seq}",
        "run_id": run_id,
        "seq": seq,
        "name": name,
        "group": "math",
        "input": input,
        "attempt": 1,
        "dispatched_at": "2026-01-01T00:00:00+00:00",
    }


async def results(transport: Transport, count: int, timeout: float = 5.0) -> list[dict[str, Any]]:
    """Take ``count`` results within ``timeout``; report what came if fewer did."""
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got += await transport.take_results(count - len(got), 0.2)
    assert len(got) == count, f"expected {count} results within {timeout}s, got {got}"
    return sorted(got, key=lambda r: r["seq"])


@pytest.fixture
async def start_worker(transport: Transport) -> AsyncIterator[Callable[..., Worker]]:
    running: list[tuple[Worker, asyncio.Task[None]]] = []

    def start(steps: list[Any] = STEPS, **options: Any) -> Worker:
        worker = Worker("math", transport, steps=steps, **{**FAST, **options})
        running.append((worker, asyncio.create_task(worker.run())))
        return worker

    yield start
    for worker, runner in running:
        await worker.stop()
        await asyncio.wait_for(runner, 5.0)


async def test_worker_runs_sync_and_async_steps_and_returns_their_outputs(
    transport: Transport, start_worker: Callable[..., Worker]
) -> None:
    worker = start_worker()

    await transport.send_tasks(
        "math", [task("math.add", {"a": 2, "b": 3}, seq=1), task("math.double", 21, seq=2)]
    )

    first, second = await results(transport, 2)
    assert first == {
        "protocol": 1,
        "step_id": "r1:1",
        "run_id": "r1",
        "seq": 1,
        "ok": True,
        "output": 5,
        "error": None,
        "attempt": 1,
        "worker": worker.name,
    }
    assert (second["ok"], second["output"]) == (True, 42)


async def test_worker_beats_while_a_slow_step_runs(
    transport: Transport, start_worker: Callable[..., Worker]
) -> None:
    async with transport.heartbeats() as feed:
        worker = start_worker()
        await transport.send_tasks("math", [task("math.slow", 0.45, seq=7)])
        [result] = await results(transport, 1)
        beats = []
        while True:  # until the feed is quiet (a busy machine delivers the last beats late)
            try:
                beats.append(await asyncio.wait_for(anext(feed), 0.5))
            except TimeoutError:
                break

    assert result["ok"] is True
    announced = [b for b in beats if b.get("kind") == "worker"]
    assert announced  # once at start, again each ANNOUNCE_EVERY beats
    assert {(a["worker"], a["group"]) for a in announced} == {(worker.name, "math")}
    beats = [b for b in beats if b.get("kind") != "worker"]
    assert len(beats) >= 3, beats
    assert {(b["step_id"], b["run_id"], b["seq"], b["attempt"], b["worker"]) for b in beats} == {
        ("r1:7", "r1", 7, 1, worker.name)
    }
    assert all(b["at"].endswith("+00:00") for b in beats)


async def test_unknown_step_comes_back_as_an_error_result(
    transport: Transport, start_worker: Callable[..., Worker]
) -> None:
    start_worker()

    await transport.send_tasks("math", [task("math.nowhere", None)])

    [result] = await results(transport, 1)
    assert result["ok"] is False
    assert result["error"]["type"] == "UnknownStepError"
    assert "math.nowhere" in result["error"]["message"]


async def test_stop_finishes_the_step_in_flight_and_sends_its_result(
    transport: Transport,
) -> None:
    started = threading.Event()

    @runlane.step(name="math.wait", group="math")
    def wait(input: float) -> str:
        started.set()
        time.sleep(input)
        return "finished"

    worker = Worker("math", transport, steps=[wait], **FAST)
    runner = asyncio.create_task(worker.run())
    await transport.send_tasks("math", [task("math.wait", 0.3)])
    while not started.is_set():
        await asyncio.sleep(0.01)

    await worker.stop()

    assert runner.done()
    [result] = await results(transport, 1, timeout=1.0)
    assert (result["ok"], result["output"]) == (True, "finished")


@pytest.mark.parametrize("transport_kind", ["inprocess"])
async def test_a_failing_step_reports_its_error_and_traceback(
    transport: Transport, start_worker: Callable[..., Worker]
) -> None:
    start_worker()

    await transport.send_tasks("math", [task("math.broken", 7)])

    [result] = await results(transport, 1)
    assert result["ok"] is False
    assert result["error"]["type"] == "ValueError"
    assert result["error"]["message"] == "cannot use 7"
    assert "ValueError: cannot use 7" in result["error"]["traceback"]


@pytest.mark.parametrize("transport_kind", ["inprocess"])
async def test_an_output_json_cannot_carry_is_an_error_result(
    transport: Transport, start_worker: Callable[..., Worker]
) -> None:
    start_worker()

    await transport.send_tasks("math", [task("math.opaque", None)])

    [result] = await results(transport, 1)
    assert result["error"]["type"] == "SerializationError"


@pytest.mark.parametrize("transport_kind", ["inprocess"])
async def test_cancelling_a_worker_still_drains_the_step_in_flight(
    transport: Transport,
) -> None:
    worker = Worker("math", transport, steps=STEPS, **FAST)
    runner = asyncio.create_task(worker.run())
    await transport.send_tasks("math", [task("math.slow", 0.2)])
    while worker.in_flight == 0:
        await asyncio.sleep(0.01)

    runner.cancel()

    with pytest.raises(asyncio.CancelledError):
        await runner
    [result] = await results(transport, 1, timeout=0.5)
    assert result["output"] == "done"


@pytest.mark.parametrize("transport_kind", ["inprocess"])
async def test_worker_runs_at_most_concurrency_steps_at_once(transport: Transport) -> None:
    active, peak = 0, 0

    @runlane.step(name="math.count", group="math")
    async def count(input: int) -> int:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.05)
        active -= 1
        return input

    worker = Worker("math", transport, steps=[count], concurrency=2, **FAST)
    runner = asyncio.create_task(worker.run())
    await transport.send_tasks("math", [task("math.count", i, seq=i + 1) for i in range(6)])

    done = await results(transport, 6)
    await worker.stop()
    await runner

    assert [r["output"] for r in done] == list(range(6))
    assert peak == 2


async def test_worker_takes_only_its_own_groups_tasks() -> None:
    transport = InProcessTransport()
    worker = Worker("math", transport, steps=STEPS, **FAST)
    runner = asyncio.create_task(worker.run())
    await transport.send_tasks("mail", [task("math.add", {"a": 1, "b": 1})])

    assert await transport.take_results(1, 0.2) == []
    await worker.stop()
    await runner
    assert len(await transport.take_tasks("mail", 5, 0)) == 1


class FlakyTransport(InProcessTransport):
    """Fails the first take, as a transport does while its server restarts."""

    failed = False

    async def take_tasks(self, group: str, max_items: int, timeout: float) -> list[Any]:
        if not self.failed:
            self.failed = True
            raise ConnectionError("server restarting")
        return await super().take_tasks(group, max_items, timeout)


async def test_worker_survives_a_failed_take(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("runlane.remote.worker.TAKE_RETRY_DELAY", 0.01)
    transport = FlakyTransport()
    worker = Worker("math", transport, steps=STEPS, **FAST)
    runner = asyncio.create_task(worker.run())

    await transport.send_tasks("math", [task("math.double", 4)])

    [result] = await results(transport, 1)
    await worker.stop()
    await runner
    assert (transport.failed, result["output"]) == (True, 8)


def test_worker_refuses_a_concurrency_below_one() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        Worker("math", InProcessTransport(), steps=STEPS, concurrency=0)


class CancelSwallowingBeats(InProcessTransport):
    """Heartbeats whose publish turns a cancellation into a driver error, as some drivers do."""

    def __init__(self) -> None:
        super().__init__()
        self.beats_after_result = 0
        self.result_sent = False

    async def publish_heartbeat(self, beat: dict[str, Any]) -> None:
        if self.result_sent:
            self.beats_after_result += 1
        try:
            await asyncio.sleep(0.3)  # still publishing when the step ends
        except asyncio.CancelledError:
            raise RuntimeError("query cancelled") from None

    async def send_result(self, result: dict[str, Any]) -> None:
        self.result_sent = True
        await super().send_result(result)


async def test_beats_stop_with_the_step_even_when_a_cancel_surfaces_as_an_error() -> None:
    transport = CancelSwallowingBeats()
    worker = Worker(group="math", transport=transport, steps=STEPS, **FAST)
    running = asyncio.create_task(worker.run())
    await transport.send_tasks("math", [task("math.slow", 0.12)])
    [result] = await transport.take_results(1, 5.0)
    assert result["ok"]
    await asyncio.sleep(0.8)
    await worker.stop()
    await running
    assert transport.beats_after_result == 0
