"""docs/protocol/: the JSON Schemas of the wire messages, their golden examples, and the messages
the engine and the Python worker really send, checked against them (jsonschema-rs)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest

import runlane
from runlane import Engine, RemoteWorkflow, RunStatus, Worker
from runlane.remote.tasks import parse_decision
from runlane.stores import MemoryStore
from runlane.transports import InProcessTransport
from runlane.transports.base import Message

PROTOCOL = Path(__file__).parents[2] / "docs" / "protocol"
BASE = "https://runlane.dev/protocol/1/"
KINDS = [p.name.removesuffix(".schema.json") for p in PROTOCOL.glob("*.schema.json")]


def _registry() -> jsonschema_rs.Registry:
    resources = [
        (BASE + path.name, json.loads(path.read_text())) for path in PROTOCOL.glob("*.schema.json")
    ]
    return jsonschema_rs.Registry(resources)


REGISTRY = _registry()


def validator(kind: str) -> Any:
    schema = json.loads((PROTOCOL / f"{kind}.schema.json").read_text())
    return jsonschema_rs.validator_for(schema, registry=REGISTRY)


def examples() -> list[Path]:
    return sorted((PROTOCOL / "examples").glob("*.json"))


def kind_of(example: Path) -> str:
    return next(k for k in sorted(KINDS, key=len, reverse=True) if example.stem.startswith(k))


@pytest.mark.parametrize("example", examples(), ids=lambda p: p.stem)
def test_every_golden_example_follows_its_schema(example: Path) -> None:
    validator(kind_of(example)).validate(json.loads(example.read_text()))


def test_every_message_schema_has_a_golden_example() -> None:
    covered = {kind_of(e) for e in examples()}
    assert covered == set(KINDS) - {"defs"}


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("decision", {"kind": "decision", "run_id": "r", "outcome": {"type": "suspend"}}),
        (
            "decision",
            {"kind": "decision", "task_id": "t", "run_id": "r", "outcome": {"type": "explode"}},
        ),
        (
            "decision",
            {
                "kind": "decision",
                "task_id": "t",
                "run_id": "r",
                "outcome": {"type": "suspend"},
                "checkpoints": [{"seq": 1, "kind": "child", "name": "c", "status": "pending"}],
            },
        ),
        (
            "decision",
            {
                "kind": "decision",
                "task_id": "t",
                "run_id": "r",
                "outcome": {"type": "suspend"},
                "checkpoints": [
                    {
                        "seq": 1,
                        "kind": "attributes",
                        "name": "attributes",
                        "status": "completed",
                        "output": {"tags": ["a list is no attribute"]},
                    }
                ],
            },
        ),
        (
            "workflow-task",
            {
                "kind": "workflow",
                "task_id": "t",
                "run_id": "r",
                "workflow": "w",
                "version": "1",
                "attempt": 0,
                "history": [],
            },
        ),
        ("step-result", {"step_id": "r:1", "run_id": "r", "seq": 1, "attempt": 1}),
        (
            "step-task",
            {"step_id": "r:1", "run_id": "r", "seq": 1, "name": "s", "attempt": 1, "fence": -1},
        ),
        (
            "step-heartbeat",
            {"step_id": "r:1", "run_id": "r", "seq": 1, "attempt": 1, "fence": "7"},
        ),
    ],
)
def test_a_message_breaking_its_schema_is_refused(kind: str, message: Message) -> None:
    assert not validator(kind).is_valid(message)


@pytest.mark.parametrize(
    "example", [e for e in examples() if e.stem.startswith("decision")], ids=lambda p: p.stem
)
def test_the_engine_reads_every_golden_decision(example: Path) -> None:
    decision = parse_decision(json.loads(example.read_text()))
    assert decision.task_id and decision.outcome["type"]


class Recording(InProcessTransport):
    """Keeps every task, result and beat that goes through it."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[Message] = []

    async def send_tasks(self, group: str, tasks: Any) -> None:
        self.sent.extend(dict(t) for t in tasks)
        await super().send_tasks(group, tasks)

    async def send_result(self, result: Message) -> None:
        self.sent.append(dict(result))
        await super().send_result(result)

    async def send_decision(self, queue: str, decision: Message) -> None:
        self.sent.append(dict(decision))
        await super().send_decision(queue, decision)

    async def publish_heartbeat(self, beat: Message) -> None:
        self.sent.append(dict(beat))
        await super().publish_heartbeat(beat)


@runlane.step(name="proto.remote", group="proto-steps")
def remote_step(x: int) -> int:
    return x + 1


@runlane.step(name="proto.local")
def local_step(x: int) -> int:
    return x * 3


@runlane.workflow(name="proto-wf", group="proto")
async def proto_wf(ctx: runlane.Context, x: int) -> int:
    ctx.set_attributes({"x": x, "stage": "started", "ratio": 0.5, "ok": True})
    a = await ctx.step(local_step, x)
    b = await ctx.step(remote_step, a)
    await ctx.sleep(0.01)
    update = await ctx.wait_for_update("bump")
    await ctx.reply(update, int(update.payload) + 1)
    return int(b) + int(await ctx.wait_for_signal("go"))


def message_kind(message: Message) -> str:
    if message.get("kind") == "decision":
        return "decision"
    if message.get("kind") == "worker":
        return "worker-descriptor"
    if message.get("kind") == "workflow":
        return "workflow-task" if "history" in message else "workflow-heartbeat"
    if "ok" in message:
        return "step-result"
    return "step-task" if "name" in message else "step-heartbeat"


async def test_the_messages_the_engine_and_the_worker_send_follow_the_schemas() -> None:
    transport = Recording()
    engine = Engine(
        MemoryStore(),
        transport=transport,
        poll_interval=0.05,
        remote_workflows=[RemoteWorkflow("proto-wf", group="proto")],
    )
    crew = [
        Worker(
            "proto",
            transport,
            workflows=[proto_wf],
            steps=[local_step],
            poll_timeout=0.05,
            heartbeat_interval=0.01,
        ),
        Worker(
            "proto-steps",
            transport,
            steps=[remote_step],
            poll_timeout=0.05,
            heartbeat_interval=0.01,
        ),
    ]
    tasks = [asyncio.create_task(w.run()) for w in crew]
    async with engine:
        await engine.start("proto-wf", 2, run_id="p")
        assert await engine.update("p", "bump", 1, timeout=10) == 2
        await engine.signal("p", "go", 10)
        done = await engine.wait_for_run("p", timeout=10)
    for worker in crew:
        await worker.stop()
    await asyncio.gather(*tasks)
    assert done.status == RunStatus.COMPLETED and done.output == 17
    seen = set()
    for message in transport.sent:
        kind = message_kind(message)
        seen.add(kind)
        validator(kind).validate(message)
    assert {"workflow-task", "decision", "step-task", "step-result", "worker-descriptor"} <= seen
    written = {c["kind"] for m in transport.sent for c in m.get("checkpoints", [])}
    assert {"update", "reply"} <= written
    fenced = {message_kind(m) for m in transport.sent if isinstance(m.get("fence"), int)}
    assert {"workflow-task", "step-task", "step-result", "step-heartbeat"} <= fenced


async def test_an_engine_hears_who_joined_and_says_when_a_worker_speaks_another_protocol(
    caplog: pytest.LogCaptureFixture,
) -> None:
    transport = InProcessTransport()
    engine = Engine(MemoryStore(), transport=transport, poll_interval=0.05)
    worker = Worker("proto-steps", transport, steps=[remote_step], poll_timeout=0.05)
    async with engine:
        assert engine._execution.remote is not None
        runner = asyncio.create_task(worker.run())
        for _ in range(200):
            if worker.name in engine._execution.remote.workers:
                break
            await asyncio.sleep(0.01)
        await worker.stop()
        await runner
        heard = engine._execution.remote.workers[worker.name]
        assert heard["group"] == "proto-steps" and heard["steps"] == ["proto.remote"]
        assert heard["protocol"] == 1 and heard["language"] == "python"
        with caplog.at_level(logging.WARNING, logger="runlane.remote.dispatch"):
            await transport.publish_heartbeat(
                {**worker.descriptor(), "worker": "w2", "protocol": 2}
            )
            for _ in range(200):
                if "cannot work with this engine" in caplog.text:
                    break
                await asyncio.sleep(0.01)
    assert "'w2' cannot work with this engine: protocol version 2" in caplog.text
    assert "w2" not in engine._execution.remote.workers
