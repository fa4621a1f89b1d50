"""The Transport contract (``runlane.transports.base``) as pytest tests.

Every transport runlane ships passes it (``tests/contract/``), and so can yours: import the tests
into a test module and give them a ``make_transport`` fixture, an async factory that opens a new
transport object on your backend at each call (every one on the same queues, as the engines and
workers of one deployment would open them) and closes them all after the test::

    import pytest
    from runlane.testing.transport_contract import *  # noqa: F403  the contract's tests

    @pytest.fixture
    async def make_transport():
        opened = []

        async def build():
            transport = MyTransport("mq://test")
            await transport.open()
            opened.append(transport)
            return transport

        yield build
        for transport in opened:
            await transport.close()

Each test gets ``transport`` (one of them) or calls ``make_transport`` for more. A transport
without a run queue (``has_run_queue`` false, like the in-process one) skips the run-queue tests.
Two tests check that a 10,000-message fan goes out in at most 3 requests to the backend: override
``round_trips`` (a context manager factory yielding a one-item list, the count) to count yours;
by default the count is not checked. The suite needs pytest and pytest-asyncio.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import pytest_asyncio

from runlane.testing._suite import export_tests
from runlane.transports.base import Transport

MakeTransport = Callable[[], Awaitable[Transport]]


@pytest_asyncio.fixture
async def transport(make_transport: MakeTransport) -> Transport:
    return await make_transport()


@pytest.fixture
def round_trips() -> Callable[[], Any]:
    """Count nothing: a backend's own suite overrides this to bound its requests."""

    @contextmanager
    def not_counting() -> Iterator[list[int] | None]:
        yield None

    return not_counting


def needs_run_queue(transport: Transport) -> None:
    if not transport.has_run_queue:
        pytest.skip(f"{type(transport).__name__} has no run queue")


CODE = "flow@1"
"""The code (``addresses.code``) of the runs these tests send: workflow ``flow``, version 1."""


def runs(
    *specs: tuple[str, int],
    namespace: str | None = None,
    workflow: str = "flow",
    version: str = "1",
) -> list[dict[str, Any]]:
    return [
        {
            "run_id": run_id,
            "namespace": namespace,
            "workflow": workflow,
            "version": version,
            "priority": priority,
            "reason": "start",
        }
        for run_id, priority in specs
    ]


def tasks(*ids: str, group: str = "billing") -> list[dict[str, Any]]:
    return [
        {
            "step_id": f"{run_id}:1",
            "run_id": run_id,
            "seq": 1,
            "name": "billing.charge",
            "group": group,
            "input": {"amount": 5, "tags": ["a", "b"]},
            "attempt": 1,
            "dispatched_at": "2026-01-01T00:00:00+00:00",
        }
        for run_id in ids
    ]


def run_ids(messages: list[dict[str, Any]]) -> list[str]:
    return [m["run_id"] for m in messages]


async def take_all(take: Callable[[int, float], Awaitable[list[Any]]], expected: int) -> list[Any]:
    """Keep taking until ``expected`` messages came or a take comes back empty."""
    got: list[Any] = []
    while len(got) < expected:
        batch = await take(expected - len(got), 1.0)
        if not batch:
            break
        got.extend(batch)
    return got


# -------------------------------------------------------------------- opening


async def test_many_transports_opening_a_new_backend_at_once_all_open(
    make_transport: MakeTransport,
) -> None:
    """Processes starting together on a new SQLite file all switch it to WAL without error."""
    opened = await asyncio.gather(*(make_transport() for _ in range(6)))

    await opened[0].send_tasks("billing", [{"id": "t1"}])
    got = await opened[-1].take_tasks("billing", 5, 1.0)

    assert [m["id"] for m in got] == ["t1"]


# -------------------------------------------------------------------- runs


async def test_runs_are_taken_most_urgent_first_then_oldest(transport: Transport) -> None:
    needs_run_queue(transport)
    await transport.enqueue_runs(runs(("low-1", 0), ("high-1", 5), ("low-2", 0), ("mid", 1)))
    await transport.enqueue_runs(runs(("high-2", 5)))

    taken = await transport.take_runs([None], [CODE], 3, 1.0) + await transport.take_runs(
        None, [CODE], 10, 1.0
    )

    assert run_ids(taken) == ["high-1", "high-2", "mid", "low-1", "low-2"]


async def test_run_messages_come_back_as_sent(transport: Transport) -> None:
    needs_run_queue(transport)
    sent = runs(("r1", 3), namespace="billing")

    await transport.enqueue_runs(sent)

    assert await transport.take_runs(["billing"], [CODE], 5, 1.0) == sent


async def test_each_run_message_goes_to_exactly_one_of_two_takers(
    make_transport: MakeTransport,
) -> None:
    first, second = await make_transport(), await make_transport()
    needs_run_queue(first)
    await first.enqueue_runs(runs(*((f"r{i}", i % 3) for i in range(200))))

    async def drain(t: Transport) -> list[str]:
        got: list[str] = []
        while batch := await t.take_runs(None, [CODE], 7, 0.15):
            got += run_ids(batch)
        return got

    a, b = await asyncio.gather(drain(first), drain(second))

    assert sorted(a + b) == sorted(f"r{i}" for i in range(200))
    assert len(a + b) == 200


async def test_namespaces_have_their_own_run_queues(transport: Transport) -> None:
    needs_run_queue(transport)
    await transport.enqueue_runs(
        runs(("a1", 0), namespace="a") + runs(("b1", 0), namespace="b") + runs(("n1", 0))
    )

    assert run_ids(await transport.take_runs(["a"], [CODE], 10, 0.5)) == ["a1"]
    assert run_ids(await transport.take_runs([None], [CODE], 10, 0.5)) == ["n1"]
    assert await transport.take_runs(["a"], [CODE], 10, 0.1) == []
    assert run_ids(await transport.take_runs(None, [CODE], 10, 0.5)) == ["b1"]


async def test_runs_of_a_code_go_only_to_takers_of_that_code(transport: Transport) -> None:
    needs_run_queue(transport)
    await transport.enqueue_runs(
        runs(("v1", 0)) + runs(("v2", 0), version="2") + runs(("other", 0), workflow="other")
    )

    assert run_ids(await transport.take_runs(None, ["flow@2"], 10, 0.5)) == ["v2"]
    assert await transport.take_runs(None, ["flow@3"], 10, 0.1) == []
    assert run_ids(await transport.take_runs([None], [CODE], 10, 0.5)) == ["v1"]
    assert run_ids(await transport.take_runs(None, ["other@1", CODE], 10, 0.5)) == ["other"]


async def test_a_run_message_without_its_code_is_refused_at_the_send(
    transport: Transport,
) -> None:
    needs_run_queue(transport)
    message = runs(("r1", 0))[0]
    del message["version"]

    with pytest.raises(ValueError, match="workflow and version"):
        await transport.enqueue_runs([message])


async def test_namespaces_and_codes_never_share_a_run_queue(transport: Transport) -> None:
    """The names keep any two (namespace, code) pairs apart, however their text overlaps."""
    needs_run_queue(transport)
    await transport.enqueue_runs(
        runs(("a", 0), namespace="x:y", workflow="w")
        + runs(("b", 0), namespace="x", workflow="y:w")
    )

    assert run_ids(await transport.take_runs(["x"], ["y:w@1"], 10, 0.5)) == ["b"]
    assert run_ids(await transport.take_runs(["x:y"], ["w@1"], 10, 0.5)) == ["a"]


async def test_taker_of_every_namespace_sees_a_namespace_created_while_it_waits(
    make_transport: MakeTransport,
) -> None:
    taker, sender = await make_transport(), await make_transport()
    needs_run_queue(taker)
    waiting = asyncio.create_task(taker.take_runs(None, [CODE], 10, 5.0))
    await asyncio.sleep(0.2)
    started = time.monotonic()

    await sender.enqueue_runs(runs(("late", 0), namespace=f"fresh-{uuid.uuid4().hex[:6]}"))

    assert run_ids(await waiting) == ["late"]
    assert time.monotonic() - started < 1.0


async def test_ten_thousand_runs_go_out_in_a_few_round_trips(
    transport: Transport, round_trips: Callable[[], Any]
) -> None:
    needs_run_queue(transport)
    fan = runs(*((f"child-{i}", 0) for i in range(10_000)), namespace="fan")
    started = time.monotonic()

    with round_trips() as count:
        await transport.enqueue_runs(fan)

    assert time.monotonic() - started < 3.0
    assert count is None or count[0] <= 3
    taken = await take_all(lambda n, t: transport.take_runs(["fan"], [CODE], n, t), 10_000)
    assert sorted(run_ids(taken)) == sorted(run_ids(fan))


async def test_enqueue_of_nothing_sends_nothing(
    transport: Transport, round_trips: Callable[[], Any]
) -> None:
    needs_run_queue(transport)
    with round_trips() as count:
        await transport.enqueue_runs([])

    assert count is None or count[0] == 0


# -------------------------------------------------------------------- waiting


@pytest.mark.parametrize("queue", ["runs", "tasks", "results", "decisions"])
async def test_take_on_an_empty_queue_returns_nothing_in_time(
    transport: Transport, queue: str
) -> None:
    if queue == "runs" and not transport.has_run_queue:
        with pytest.raises(NotImplementedError):
            await transport.take_runs(["ns"], [CODE], 5, 0.2)
        return
    take: Callable[[], Awaitable[list[Any]]] = {
        "runs": lambda: transport.take_runs(["ns"], [CODE], 5, 0.2),
        "tasks": lambda: transport.take_tasks("billing", 5, 0.2),
        "results": lambda: transport.take_results(5, 0.2),
        "decisions": lambda: transport.take_decisions(["decisions:flow@1"], 5, 0.2),
    }[queue]
    started = time.monotonic()

    assert await take() == []

    assert 0.15 <= time.monotonic() - started < 1.5


async def test_take_without_waiting_returns_at_once(transport: Transport) -> None:
    started = time.monotonic()

    assert await transport.take_tasks("billing", 5, 0) == []

    assert time.monotonic() - started < 0.5


async def test_waiting_taker_wakes_when_another_instance_sends(
    make_transport: MakeTransport,
) -> None:
    # PostgreSQL polls only every 2 s: waking in well under that takes LISTEN/NOTIFY.
    taker, sender = await make_transport(), await make_transport()
    await taker.take_tasks("billing", 1, 0)  # the first take starts listening
    waiting = asyncio.create_task(taker.take_tasks("billing", 5, 5.0))
    await asyncio.sleep(0.2)
    started = time.monotonic()

    await sender.send_tasks("billing", tasks("r1"))

    assert run_ids(await waiting) == ["r1"]
    assert time.monotonic() - started < 1.0


async def test_close_releases_a_waiting_taker(transport: Transport) -> None:
    waiting = asyncio.create_task(transport.take_tasks("billing", 5, 10.0))
    await asyncio.sleep(0.2)

    await transport.close()

    assert await asyncio.wait_for(waiting, 2.0) == []
    assert await transport.take_results(5, 1.0) == []


# -------------------------------------------------------------------- tasks and results


async def test_tasks_come_back_as_sent_oldest_first(transport: Transport) -> None:
    sent = tasks("r1", "r2", "r3")

    await transport.send_tasks("billing", sent[:2])
    await transport.send_tasks("billing", sent[2:])

    assert await transport.take_tasks("billing", 10, 1.0) == sent


async def test_tasks_of_one_group_are_invisible_to_another(transport: Transport) -> None:
    await transport.send_tasks("billing", tasks("b1"))
    await transport.send_tasks("mail", tasks("m1", group="mail"))

    assert await transport.take_tasks("shipping", 10, 0.1) == []
    assert run_ids(await transport.take_tasks("mail", 10, 1.0)) == ["m1"]
    assert run_ids(await transport.take_tasks("billing", 10, 1.0)) == ["b1"]


async def test_take_returns_at_most_max_items(transport: Transport) -> None:
    await transport.send_tasks("billing", tasks("r1", "r2", "r3"))

    assert run_ids(await transport.take_tasks("billing", 2, 1.0)) == ["r1", "r2"]
    assert run_ids(await transport.take_tasks("billing", 2, 1.0)) == ["r3"]


async def test_each_task_goes_to_exactly_one_of_two_workers(
    make_transport: MakeTransport,
) -> None:
    first, second = await make_transport(), await make_transport()
    ids = [f"r{i}" for i in range(200)]
    await first.send_tasks("billing", tasks(*ids))

    async def drain(t: Transport) -> list[str]:
        got: list[str] = []
        while batch := await t.take_tasks("billing", 7, 0.15):
            got += run_ids(batch)
        return got

    a, b = await asyncio.gather(drain(first), drain(second))

    assert sorted(a + b) == sorted(ids)


async def test_ten_thousand_tasks_go_out_in_a_few_round_trips(
    transport: Transport, round_trips: Callable[[], Any]
) -> None:
    ids = [f"r{i}" for i in range(10_000)]
    started = time.monotonic()

    with round_trips() as count:
        await transport.send_tasks("fan", tasks(*ids, group="fan"))

    assert time.monotonic() - started < 3.0
    assert count is None or count[0] <= 3
    taken = await take_all(lambda n, t: transport.take_tasks("fan", n, t), 10_000)
    assert run_ids(taken) == ids


async def test_a_result_sent_by_a_worker_is_taken_by_any_instance(
    make_transport: MakeTransport,
) -> None:
    worker, instance = await make_transport(), await make_transport()
    result = {
        "step_id": "r1:3",
        "run_id": "r1",
        "seq": 3,
        "ok": False,
        "output": None,
        "error": {"type": "ValueError", "message": "no", "traceback": "..."},
        "attempt": 2,
        "worker": "w-1",
    }

    await worker.send_result(result)

    assert await instance.take_results(10, 1.0) == [result]
    assert await instance.take_results(10, 0.1) == []


def decision(run_id: str) -> dict[str, Any]:
    return {
        "protocol": 1,
        "kind": "decision",
        "task_id": f"task-{run_id}",
        "run_id": run_id,
        "worker": "w-1",
        "checkpoints": [],
        "consumed_signals": [],
        "commands": [],
        "outcome": {"type": "complete", "output": {"n": 1}},
    }


async def test_decisions_go_to_the_queue_their_task_named_oldest_first(
    make_transport: MakeTransport,
) -> None:
    worker, instance = await make_transport(), await make_transport()
    await worker.send_decision("decisions:flow@1", decision("a"))
    await worker.send_decision("decisions:flow@2", decision("b"))
    await worker.send_decision("decisions:flow@1", decision("c"))

    assert await instance.take_decisions(["decisions:other@1"], 10, 0.1) == []
    assert await instance.take_decisions(["decisions:flow@1"], 10, 1.0) == [
        decision("a"),
        decision("c"),
    ]
    both = ["decisions:flow@1", "decisions:flow@2"]
    assert await instance.take_decisions(both, 10, 1.0) == [decision("b")]
    assert await instance.take_results(10, 0.1) == []


async def test_a_waiting_decision_taker_wakes_when_a_decision_comes(
    make_transport: MakeTransport,
) -> None:
    worker, instance = await make_transport(), await make_transport()
    await instance.take_decisions(["decisions:flow@1"], 1, 0)  # the first take starts listening
    waiting = asyncio.create_task(instance.take_decisions(["decisions:flow@1"], 5, 5.0))
    await asyncio.sleep(0.2)
    started = time.monotonic()

    await worker.send_decision("decisions:flow@1", decision("a"))

    assert await waiting == [decision("a")]
    assert time.monotonic() - started < 1.5


# -------------------------------------------------------------------- heartbeats


async def test_every_subscriber_hears_every_heartbeat(make_transport: MakeTransport) -> None:
    one, two, worker = await make_transport(), await make_transport(), await make_transport()
    beats = [
        {
            "step_id": f"r1:{i}",
            "run_id": "r1",
            "seq": i,
            "attempt": 1,
            "worker": "w",
            "at": "2026-01-01T00:00:00+00:00",
        }
        for i in range(3)
    ]
    async with one.heartbeats() as feed_one, two.heartbeats() as feed_two:
        for beat in beats:
            await worker.publish_heartbeat(beat)

        heard_one = [await asyncio.wait_for(anext(feed_one), 2.0) for _ in beats]
        heard_two = [await asyncio.wait_for(anext(feed_two), 2.0) for _ in beats]

    assert heard_one == beats
    assert heard_two == beats


async def test_heartbeat_with_nobody_listening_is_not_an_error(transport: Transport) -> None:
    await transport.publish_heartbeat({"step_id": "r:1", "run_id": "r", "seq": 1})


async def test_heartbeat_feed_ends_when_the_transport_closes(transport: Transport) -> None:
    async with transport.heartbeats() as feed:
        ending = asyncio.create_task(anext(feed, None))
        await asyncio.sleep(0.1)

        await transport.close()

        assert await asyncio.wait_for(ending, 2.0) is None


__all__ = export_tests(globals(), "transport", "round_trips")
