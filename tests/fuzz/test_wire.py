"""Fuzzing the wire: malformed, truncated, mistyped, versioned and replayed messages.

Every message kind on every transport: a message that does not follow the protocol is dropped
with a logged reason, its consumer goes on consuming, and nothing is written for it. A replayed
message changes nothing the first one did not.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import runlane
from runlane import Engine, RunStatus
from runlane.remote.tasks import (
    check_workflow_task,
    child_outcome,
    parse_decision,
    record_from_doc,
    signal_from_doc,
)
from runlane.remote.worker import Worker
from runlane.serialization import dumps
from runlane.stores.sqlite import SqliteStore
from runlane.transports import DbTransport, RedisTransport, Transport
from runlane.transports.addresses import (
    RESULTS,
    code,
    decision_queue,
    run_queue,
    run_topic,
    task_queue,
)
from runlane.transports.messages import Malformed, check
from tests.contract import test_transport_contract as contract

from .strategies import json_values

transport_kind = contract.transport_kind
make_transport = contract.make_transport

VALID: dict[str, dict[str, Any]] = {
    "run": {
        "run_id": "r",
        "reason": "wake",
        "namespace": None,
        "workflow": "w",
        "version": "1",
        "priority": 0,
    },
    "task": {"step_id": "r:1", "run_id": "r", "seq": 1, "name": "s", "attempt": 1},
    "result": {"step_id": "r:1", "run_id": "r", "seq": 1, "attempt": 1, "ok": True},
    "heartbeat": {"step_id": "r:1", "run_id": "r", "seq": 1, "attempt": 1},
}


def mangled(kind: str) -> list[Any]:
    """Messages of ``kind`` that break the protocol in every way a field can."""
    valid = VALID[kind]
    wrong: list[Any] = [[1, 2], "text", None, 7, {}, {**valid, "protocol": 2}]
    for field in valid:
        wrong.append({k: v for k, v in valid.items() if k != field} if field != "namespace" else {})
        bad: Any
        for bad in ("", "1", 1.5, -1, [], {}, True):
            wrong.append({**valid, field: bad})
    return [m for m in wrong if not _is_valid(kind, m)]


def _is_valid(kind: str, message: Any) -> bool:
    try:
        check(kind, message)
        return True
    except Malformed:
        return False


@given(st.sampled_from(sorted(VALID)), json_values | st.dictionaries(st.text(), json_values))
@settings(max_examples=400, deadline=None)
def test_checking_any_value_as_any_message_kind_answers_it_or_refuses_it(
    kind: str, value: Any
) -> None:
    try:
        assert check(kind, value) is value
    except Malformed as refused:
        assert str(refused)


def test_each_valid_message_passes_and_each_mangled_one_is_refused_with_a_reason() -> None:
    for kind, valid in VALID.items():
        assert check(kind, dict(valid)) == valid
        assert check(kind, {**valid, "protocol": 1, "extra": "ignored"})
        for message in mangled(kind):
            with pytest.raises(Malformed) as refused:
                check(kind, message)
            assert kind in str(refused.value) or "protocol" in str(refused.value)


# ---------------------------------------------------------------- through real transports


@runlane.step(name="wire.remote", group="wire", timeout=5.0)
async def remote_step(x: int) -> int:
    EXECUTED.append(x)
    return x * 2


EXECUTED: list[int] = []


@runlane.workflow(name="wire.flow")
async def flow(ctx: runlane.Context, x: int) -> int:
    return int(await ctx.step(remote_step, x))


@runlane.step(name="wire.local")
async def local_step(x: int) -> int:
    EXECUTED.append(x)
    return x + 1


@runlane.workflow(name="wire.turned")
async def turned(ctx: runlane.Context, x: int) -> int:
    """A remote workflow: the engine sends each turn to a worker of ``wire``."""
    return int(await ctx.step(local_step, x))


FLOW_CODE = code("wire.flow", "1")  # the run queue the engine of ``fleet`` takes from


async def _raw(transport: Transport, queue: str, payload: str, *, json: bool = False) -> None:
    """Write a payload straight into a queue, as a corrupted queue would hold it (one that is
    not JSON only where the backend can hold it: ``json`` says the payload is JSON)."""
    if isinstance(transport, RedisTransport):
        if queue.startswith("runs"):
            await transport.client.zadd(transport.key(queue), {f"{0:020d}|{payload}": 0})
        else:
            await transport.client.rpush(transport.key(queue), payload)
    elif isinstance(transport, DbTransport) and (json or "sqlite" in transport.url):
        key = transport.key(queue)
        topic = transport.key(run_topic(FLOW_CODE)) if queue.startswith("runs") else key
        await transport._insert([(key, topic, payload, 0)])


RAW = ["{truncated", "not json at all", '{"run_id": "r", "reason": "wake"', "\x00\x01"]


@pytest.fixture
async def fleet(
    make_transport: Callable[..., Any], tmp_path: Path
) -> AsyncIterator[Callable[..., Any]]:
    """An engine on SQLite and a worker, on the transport under test."""
    EXECUTED.clear()
    made: list[Any] = []

    async def build(**options: Any) -> tuple[Engine, Worker, Transport]:
        transport = await make_transport()
        engine = Engine(
            SqliteStore(tmp_path / "wire.db"),
            transport=transport,
            workflows=[flow],
            poll_interval=0.05,
            **options,
        )
        await engine.__aenter__()
        worker = Worker(
            "wire",
            await make_transport(),
            workflows=[turned],
            steps=[remote_step, local_step],
            poll_timeout=0.1,
        )
        made.append((engine, worker, asyncio.create_task(worker.run())))
        return engine, worker, transport

    yield build
    for engine, worker, running in made:
        await worker.stop()
        await running
        await engine.__aexit__(None, None, None)


async def _completes(engine: Engine, x: int, run_id: str) -> None:
    await engine.start(flow, x, run_id=run_id)
    done = await engine.wait_for_run(run_id, timeout=20)
    assert (done.status, done.output) == (RunStatus.COMPLETED, x * 2), done.error


async def test_malformed_results_are_dropped_and_the_consumer_goes_on(
    fleet: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    engine, _, transport = await fleet()
    await _completes(engine, 1, "before")
    for message in mangled("result"):
        await transport.send_result(message)
    for payload in RAW:
        await _raw(transport, RESULTS, payload)
    # One aimed at a real run and step, but mistyped: it must not touch the record.
    await transport.send_result({**VALID["result"], "run_id": "before", "seq": "1", "ok": False})
    await _completes(engine, 2, "after")
    [record] = await engine.list_steps("before")
    assert (record.status, record.output, record.attempts) == ("completed", 2, 1)
    assert any("malformed step result" in r.getMessage() for r in caplog.records)


async def test_malformed_tasks_are_dropped_and_the_worker_goes_on(
    fleet: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    engine, _, transport = await fleet()
    await transport.send_tasks("wire", mangled("task"))
    for payload in RAW:
        await _raw(transport, task_queue("wire"), payload)
    await _completes(engine, 3, "task-after")
    assert EXECUTED == [3]
    assert any("malformed task" in r.getMessage() for r in caplog.records)


async def test_malformed_heartbeats_are_dropped_and_beats_are_still_heard(
    fleet: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    engine, _, transport = await fleet()
    await _completes(engine, 3, "beat-before")  # the engine listens to beats by now
    for message in mangled("heartbeat"):
        await transport.publish_heartbeat(message)
    await _completes(engine, 4, "beat-after")
    assert engine._execution.remote is not None and not any(
        t.done() for t in engine._execution.remote._tasks
    )
    for _ in range(50):  # a beat is a broadcast: it may be read after the run completed
        if any("malformed heartbeat" in r.getMessage() for r in caplog.records):
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("no malformed heartbeat was logged")


@pytest.mark.parametrize("transport_kind", contract.QUEUE_KINDS)  # the in-process one has none
async def test_malformed_run_messages_are_dropped_and_the_run_queue_goes_on(
    fleet: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    engine, _, transport = await fleet()
    for message in mangled("run"):
        # Written into the engine's own run queue, whatever the message says its code is.
        await _raw(transport, run_queue(None, FLOW_CODE), dumps(message), json=True)
    for payload in RAW:
        await _raw(transport, run_queue(None, FLOW_CODE), payload)
    await _completes(engine, 5, "queue-after")
    assert engine._execution.run_queue is not None and engine._execution.run_queue.consuming
    logged = [r.getMessage() for r in caplog.records]
    assert any("malformed run message" in m for m in logged)
    # The payloads that are not JSON: _raw writes them on Redis and SQLite (PostgreSQL's
    # JSON column cannot hold one).
    if isinstance(transport, RedisTransport) or "sqlite" in getattr(transport, "url", ""):
        assert any("that is not JSON" in m for m in logged)


async def test_a_replayed_result_is_applied_once(
    fleet: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    engine, worker, _ = await fleet()
    send = worker.transport.send_result

    async def twice(result: Any) -> None:  # the transport delivered it again
        await send(result)
        await send(result)

    setattr(worker.transport, "send_result", twice)  # noqa: B010 (a hook for the test)
    await _completes(engine, 6, "replayed")
    await asyncio.sleep(0.3)  # the copy lands meanwhile
    [record] = await engine.list_steps("replayed")
    assert (record.status, record.output, record.attempts) == ("completed", 12, 1)
    assert EXECUTED == [6]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


# ---------------------------------------------------------------- remote workflow turns

EXAMPLES = Path(__file__).parents[2] / "docs" / "protocol" / "examples"
DECISIONS = [
    json.loads((EXAMPLES / f"decision-{name}.json").read_text())
    for name in ("complete", "fail", "suspend")
]
WORKFLOW_TASK = json.loads((EXAMPLES / "workflow-task.json").read_text())
BAD = st.sampled_from([None, "", "x", "2026-13-45", -1, 0, 1.5, True, [], {}, [1], {"a": 1}])


@st.composite
def broken(draw: st.DrawFn, message: dict[str, Any]) -> Any:
    """``message`` with one value somewhere in it (at the top, or inside a list or object it
    holds, down to a history record's field) replaced by a value of another shape."""
    value = copy.deepcopy(message)
    holder: Any = value
    while True:
        keys = list(holder) if isinstance(holder, dict) else list(range(len(holder)))
        if not keys:
            return value
        key = draw(st.sampled_from(keys))
        inner = holder[key]
        if isinstance(inner, dict | list) and inner and draw(st.booleans()):
            holder = inner
            continue
        holder[key] = draw(BAD | json_values)
        return value


def _parses_or_refuses(parse: Callable[[Any], Any], message: Any) -> None:
    try:
        parse(message)
    except Malformed as refused:
        assert str(refused)


CHECKPOINT = DECISIONS[0]["checkpoints"][0]
HISTORY = WORKFLOW_TASK["history"]
broken_decisions = (
    st.sampled_from(DECISIONS).flatmap(broken)
    | broken(CHECKPOINT).map(lambda record: {**DECISIONS[0], "checkpoints": [record]})
    | broken(DECISIONS[0]["outcome"]).map(lambda outcome: {**DECISIONS[0], "outcome": outcome})
)
broken_tasks = broken(WORKFLOW_TASK) | st.sampled_from(HISTORY).flatmap(broken).map(
    lambda record: {**WORKFLOW_TASK, "history": [record]}
)


@given(broken_decisions | json_values)
@settings(max_examples=500, deadline=None)
def test_a_decision_parses_or_is_refused_as_malformed_and_nothing_else(message: Any) -> None:
    _parses_or_refuses(parse_decision, message)


def _replayable(task: Any) -> None:
    """What a worker reads of a workflow task before it replays the body."""
    task = check_workflow_task(task)
    run_id = str(task["run_id"])
    [record_from_doc(run_id, doc) for doc in task.get("history") or []]
    [signal_from_doc(run_id, doc) for doc in task.get("signals") or []]
    [child_outcome(doc) for doc in (task.get("children") or {}).values()]


@given(broken_tasks | json_values)
@settings(max_examples=500, deadline=None)
def test_a_workflow_task_reads_or_is_refused_as_malformed_and_nothing_else(message: Any) -> None:
    _parses_or_refuses(_replayable, message)


def _mangled_turn_messages(run_id: str) -> tuple[list[Any], list[Any], list[Any]]:
    """Decisions, workflow tasks and workflow beats aimed at ``run_id`` that break the protocol."""
    decision = {**DECISIONS[0], "run_id": run_id}
    decisions: list[Any] = [
        {"kind": "decision"},
        {**decision, "protocol": 2},
        {**decision, "task_id": 7},
        {**decision, "outcome": ["complete"]},
        {**decision, "outcome": {"type": "explode"}},
        {**decision, "outcome": {"type": "suspend", "wake_at": "tomorrow"}},
        {**decision, "consumed_signals": ["17"]},
        {**decision, "checkpoints": [{"seq": "1", "kind": "step"}]},
        {**decision, "checkpoints": [{**decision["checkpoints"][0], "attempts": "x"}]},
        {**decision, "commands": [{"type": "step", "seq": 2}]},
    ]
    task = {**WORKFLOW_TASK, "run_id": run_id, "workflow": "wire.turned", "group": "wire"}
    tasks: list[Any] = [
        {"kind": "workflow"},
        {**task, "protocol": 2},
        {**task, "attempt": "1"},
        {**task, "history": {"seq": 1}},
        {**task, "history": [{"seq": "1", "kind": "step", "status": "completed", "name": "a"}]},
        {**task, "history": [{**task["history"][0], "attempts": "x"}]},
        {**task, "history": [{**task["history"][0], "started_at": "noon"}]},
        {**task, "signals": [{"id": "17", "name": "ship"}]},
        {**task, "children": {"c": 5}},
    ]
    beats: list[Any] = [
        {"kind": "workflow", "task_id": 1, "run_id": run_id},
        {"kind": "workflow"},
        {"kind": "worker", "worker": "w", "group": ["wire"]},
        {"kind": "worker"},
    ]
    return decisions, tasks, beats


async def test_malformed_turn_messages_are_dropped_and_remote_workflows_go_on(
    fleet: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    engine, _, transport = await fleet(
        remote_workflows=[runlane.RemoteWorkflow("wire.turned", group="wire")]
    )
    await engine.start(turned, 1, run_id="turned-before")
    before = await engine.wait_for_run("turned-before", timeout=20)
    assert (before.status, before.output) == (RunStatus.COMPLETED, 2), before.error
    steps = await engine.list_steps("turned-before")
    decisions, tasks, beats = _mangled_turn_messages("turned-before")
    for i, message in enumerate(decisions):  # on the queue tasks name, and on the old one
        if i % 2:
            await transport.send_result(message)
        else:
            await transport.send_decision(decision_queue(code("wire.turned", "1")), message)
    await transport.send_tasks("wire", tasks)
    for beat in beats:
        await transport.publish_heartbeat(beat)
    await engine.start(turned, 5, run_id="turned-after")
    after = await engine.wait_for_run("turned-after", timeout=20)
    assert (after.status, after.output) == (RunStatus.COMPLETED, 6), after.error
    await asyncio.sleep(0.3)  # anything still in flight lands meanwhile
    assert await engine.get_run("turned-before") == before
    assert await engine.list_steps("turned-before") == steps
    assert EXECUTED == [1, 5]
    logged = [r.getMessage() for r in caplog.records]
    assert sum("dropping a malformed decision" in m for m in logged) == len(decisions)
    # Each refused as it was taken, none answered with a failure of the run it names.
    assert sum("dropping a malformed workflow task" in m for m in logged) == len(tasks)
    assert any("dropping a malformed workflow heartbeat" in m for m in logged)
    assert sum("cannot work with this engine" in m for m in logged) == 2  # the descriptors


def _twice(target: Any, method: str) -> None:
    """Make ``target.method`` deliver everything it sends twice, as a transport may."""
    send = getattr(target, method)

    async def twice(*args: Any) -> None:
        await send(*args)
        await send(*args)

    setattr(target, method, twice)


@pytest.mark.parametrize("replayed", ["decision", "tasks", "run message"], ids=str)
async def test_every_replayed_message_kind_changes_nothing_the_first_did_not(
    fleet: Callable[..., Any], caplog: pytest.LogCaptureFixture, replayed: str
) -> None:
    engine, worker, transport = await fleet(
        remote_workflows=[runlane.RemoteWorkflow("wire.turned", group="wire")]
    )
    if replayed == "run message" and not engine._execution.run_queue:
        pytest.skip("the in-process transport has no run queue")
    if replayed == "decision":
        _twice(worker.transport, "send_decision")
    elif replayed == "run message":
        _twice(transport, "enqueue_runs")
    else:
        _twice(transport, "send_tasks")
    await engine.start(turned, 7, run_id="turned")
    await engine.start(flow, 3, run_id="flowed")
    turned_run = await engine.wait_for_run("turned", timeout=20)
    flowed_run = await engine.wait_for_run("flowed", timeout=20)
    await asyncio.sleep(0.5)  # the copies land meanwhile
    assert (turned_run.status, turned_run.output) == (RunStatus.COMPLETED, 8), turned_run.error
    assert (flowed_run.status, flowed_run.output) == (RunStatus.COMPLETED, 6), flowed_run.error
    assert await engine.get_run("turned") == turned_run
    assert await engine.get_run("flowed") == flowed_run
    [local] = await engine.list_steps("turned")
    [remote] = await engine.list_steps("flowed")
    assert (local.status, local.output, remote.status, remote.output) == (
        "completed",
        8,
        "completed",
        6,
    )
    assert remote.attempts == 1
    # A replayed task (a step's, or a turn's with its local step) may run its step again, as
    # at-least-once delivery allows; no other copy runs anything twice.
    most = 2 if replayed == "tasks" else 1
    assert set(EXECUTED) == {3, 7} and max(Counter(EXECUTED).values()) <= most, EXECUTED
    assert not [
        r for r in caplog.records if r.name.startswith("runlane") and r.levelno >= logging.ERROR
    ]
