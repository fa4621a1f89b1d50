"""The wire protocol's second implementation: a Node.js worker (workers/node/) decides the turns
of a remote workflow, and runs its remote steps, for a Python engine on PostgreSQL over Redis."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography.fernet import Fernet as FernetKeys

from runlane import Engine, RemoteWorkflow, RunStatus, UpdateRejectedError
from runlane.codecs import Fernet
from runlane.payloads import ENCODED
from runlane.stores.base import Store
from runlane.stores.encoded import unwrapped
from runlane.transports import RedisTransport

NODE_DIR = Path(__file__).parents[2] / "workers" / "node"
REDIS_URL = os.environ.get("RUNLANE_REDIS_URL", "redis://127.0.0.1:6379/0")
NODE = shutil.which("node")

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")


@pytest.fixture
def store_kind() -> str:
    return "postgres"


@pytest.fixture(scope="module")
def node_modules() -> None:
    if (NODE_DIR / "node_modules" / "redis").exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: cannot install the Node worker's redis client")
    subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund"],
        cwd=NODE_DIR,
        check=True,
        capture_output=True,
        timeout=300,
    )


@pytest.fixture
def prefix() -> str:
    return f"rl-node-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def start_node(node_modules: None, prefix: str) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start the example's Node workers (with ``RUNLANE_FERNET_KEYS`` when ``keys`` are given);
    each is stopped (SIGTERM) and reaped after the test."""
    started: list[subprocess.Popen[str]] = []

    def start(keys: list[bytes] | None = None) -> subprocess.Popen[str]:
        env = {**os.environ, "RUNLANE_PREFIX": prefix, "RUNLANE_REDIS_URL": REDIS_URL}
        if keys:
            env["RUNLANE_FERNET_KEYS"] = ",".join(k.decode() for k in keys)
        proc = subprocess.Popen(
            [str(NODE), "example.js"],
            cwd=NODE_DIR,
            env=env,
            text=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=10)  # reaps it and closes its stderr pipe
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


@pytest.fixture
def node_worker(start_node: Callable[..., subprocess.Popen[str]]) -> subprocess.Popen[str]:
    return start_node()


async def test_a_node_worker_decides_turns_and_runs_steps_for_a_python_engine(
    store: Store, prefix: str, node_worker: subprocess.Popen[str]
) -> None:
    transport = RedisTransport(REDIS_URL, prefix=prefix)
    engine = Engine(
        store,
        transport=transport,
        poll_interval=0.1,
        remote_workflows=[
            RemoteWorkflow("js-order", group="node-wf"),
            RemoteWorkflow("js-child", group="node-wf"),
        ],
    )
    try:
        async with engine:
            await engine.start("js-order", {"name": "ada"}, run_id="js-1")
            await _until_waiting_for_signal(engine, "js-1", node_worker)
            await engine.signal("js-1", "ship", "by sea")
            done = await engine.wait_for_run("js-1", timeout=30)
            steps = await engine.list_steps("js-1")
            found = await engine.list_runs(attributes={"customer": "ada", "shipped": "by sea"})
            assert engine._execution.remote is not None
            for _ in range(100):  # announced every 10 heartbeat intervals (0.2 s here)
                if any(w["group"] == "node-wf" for w in engine._execution.remote.workers.values()):
                    break
                await asyncio.sleep(0.05)
            announced = [
                w for w in engine._execution.remote.workers.values() if w["group"] == "node-wf"
            ]
    finally:
        await transport.purge()
        await transport.close()
    assert done.status == RunStatus.COMPLETED, done.error
    assert done.output == {
        "greeting": "hello ada",
        "loud": "HELLO ADA",
        "said": "by sea",
        "child": "BY SEA",
        "pid": node_worker.pid,
    }
    assert [(w["language"], w["protocol"], w["workflows"]) for w in announced] == [
        ("node", 1, ["js-child", "js-desk", "js-keeper", "js-order", "js-waiter"])
    ]
    assert [(s.seq, s.kind, s.status) for s in steps] == [
        (1, "step", "completed"),
        (2, "patch", "completed"),
        (3, "step", "completed"),
        (4, "sleep", "completed"),
        (5, "signal", "completed"),
        (6, "attributes", "completed"),
        (7, "child", "completed"),
    ]
    assert done.attributes == {"customer": "ada", "shipped": "by sea"}
    assert [run.id for run in found] == ["js-1"]


async def test_a_node_worker_answers_and_rejects_updates(
    store: Store, prefix: str, node_worker: subprocess.Popen[str]
) -> None:
    transport = RedisTransport(REDIS_URL, prefix=prefix)
    desk = RemoteWorkflow("js-desk", group="node-wf")
    engine = Engine(store, transport=transport, poll_interval=0.1, remote_workflows=[desk])
    try:
        async with engine:
            await engine.start("js-desk", 2, run_id="desk-1")
            answer = await engine.update("desk-1", "ask", "why", timeout=30)
            with pytest.raises(UpdateRejectedError, match="an empty question") as rejected:
                await engine.update("desk-1", "ask", "", timeout=30)
            done = await engine.wait_for_run("desk-1", timeout=30)
            steps = await engine.list_steps("desk-1")
    finally:
        await transport.purge()
        await transport.close()
    assert answer == "WHY"
    assert (rejected.value.run_id, rejected.value.name) == ("desk-1", "ask")
    assert done.status == RunStatus.COMPLETED and done.output == ["why", ""], done.error
    assert [(s.seq, s.kind, s.status) for s in steps] == [
        (1, "update", "completed"),
        (2, "step", "completed"),
        (3, "reply", "completed"),
        (4, "update", "completed"),
        (5, "reply", "failed"),
    ]
    assert steps[2].input == {"update": steps[0].output["id"]}


async def test_a_node_worker_replays_a_history_from_before_a_patch_down_the_old_branch(
    prefix: str, node_worker: subprocess.Popen[str]
) -> None:
    """A turn of a run recorded before ``ctx.patched("remote-shout")`` existed: the worker
    takes the old branch (no marker, no remote step) and answers on the task's reply queue."""
    transport = RedisTransport(REDIS_URL, prefix=prefix)
    await transport.open()
    done = "2026-05-01T12:00:00.000000+00:00"
    history = [
        {"seq": 1, "kind": "step", "name": "js.greet", "status": "completed", "input": "ada",
         "output": "hello ada", "error": None, "attempts": 1, "started_at": done,
         "finished_at": done, "wake_at": None},
        {"seq": 2, "kind": "sleep", "name": "sleep", "status": "completed", "input": None,
         "output": None, "error": None, "attempts": 0, "started_at": done, "finished_at": done,
         "wake_at": done},
    ]  # fmt: skip
    task = {
        "protocol": 1, "kind": "workflow", "task_id": "t-old", "run_id": "old-1",
        "workflow": "js-order", "version": "1", "group": "node-wf", "input": {"name": "ada"},
        "attempt": 1, "priority": 0, "history": history,
        "signals": [{"id": 7, "name": "ship", "payload": "by air"}], "children": {},
        "trace": None, "dispatched_at": done, "expires_at": "2999-01-01T00:00:00+00:00",
        "reply_to": "decisions:js-order@1",
    }  # fmt: skip
    try:
        await transport.send_tasks("node-wf", [task])
        decisions = await transport.take_decisions(["decisions:js-order@1"], 1, 15.0)
        assert await transport.take_results(1, 0.2) == []  # not on the results queue
    finally:
        await transport.purge()
        await transport.close()
    [decision] = decisions
    assert decision["task_id"] == "t-old" and decision["consumed_signals"] == [7]
    assert [(c["kind"], c["seq"], c["output"]) for c in decision["checkpoints"]] == [
        ("signal", 3, "by air"),
        ("attributes", 4, {"customer": "ada", "shipped": "by air"}),
    ]
    assert [(c["type"], c["seq"], c["input"]) for c in decision["commands"]] == [
        ("child", 5, "by air")
    ]
    assert decision["outcome"] == {"type": "suspend", "wake_at": None}


async def test_a_node_worker_starts_no_task_under_a_fence_it_has_seen_surpassed(
    prefix: str, node_worker: subprocess.Popen[str]
) -> None:
    """Step tasks of one step under fences 5, 3 (sent again since), 5 (a copy), 6: the step
    runs for 5 and 6 only and reads each one's fence in its context; a workflow task of a run
    under a fence below one its turns were taken under is not replayed either."""
    transport = RedisTransport(REDIS_URL, prefix=prefix)
    await transport.open()

    def stamp(fence: int) -> dict[str, object]:
        return {
            "protocol": 1, "step_id": "r1:2", "run_id": "r1", "seq": 2, "name": "js.stamp",
            "group": "node-steps", "input": fence, "attempt": 1, "fence": fence,
        }  # fmt: skip

    def turn(fence: int) -> dict[str, object]:
        return {
            "protocol": 1, "kind": "workflow", "task_id": f"t{fence}", "run_id": "w1",
            "workflow": "js-child", "version": "1", "group": "node-wf", "input": "hi",
            "attempt": 1, "fence": fence, "history": [], "signals": [], "children": {},
            "expires_at": "2999-01-01T00:00:00+00:00", "reply_to": "decisions:js-child@1",
        }  # fmt: skip

    try:
        await transport.send_tasks("node-steps", [stamp(5), stamp(3), stamp(5), stamp(6)])
        await transport.send_tasks("node-wf", [turn(4), turn(2)])
        results: list[dict[str, object]] = []
        for _ in range(30):
            results += await transport.take_results(4, 0.5)
            if len(results) >= 2:
                break
        results += await transport.take_results(4, 0.5)  # nothing more may come
        decisions = await transport.take_decisions(["decisions:js-child@1"], 4, 10.0)
        decisions += await transport.take_decisions(["decisions:js-child@1"], 4, 0.5)
    finally:
        await transport.purge()
        await transport.close()
    assert [(r["fence"], r["output"]) for r in results] == [
        (5, {"input": 5, "step": "r1:2", "fence": 5}),
        (6, {"input": 6, "step": "r1:2", "fence": 6}),
    ]
    assert [d["task_id"] for d in decisions] == ["t4"]


async def _until_waiting_for_signal(
    engine: Engine, run_id: str, proc: subprocess.Popen[str]
) -> None:
    kinds: list[tuple[str, str]] = []
    for _ in range(300):
        kinds = [(s.kind, s.status) for s in await engine.list_steps(run_id)]
        if ("signal", "pending") in kinds:
            return
        if proc.poll() is not None:
            raise AssertionError(
                f"the node worker exited: {proc.stderr.read() if proc.stderr else ''}"
            )
        await asyncio.sleep(0.1)
    raise AssertionError(f"run {run_id} never waited for its signal; records: {kinds}")


async def test_a_node_workers_detached_child_outlives_its_parents_cancellation(
    store: Store, prefix: str, node_worker: subprocess.Popen[str]
) -> None:
    transport = RedisTransport(REDIS_URL, prefix=prefix)
    declared = [RemoteWorkflow(name, group="node-wf") for name in ("js-keeper", "js-waiter")]
    engine = Engine(store, transport=transport, poll_interval=0.1, remote_workflows=declared)
    kept, tied = "k-1.child.1", "k-1.child.2"
    try:
        async with engine:
            await engine.start("js-keeper", None, run_id="k-1")
            for _ in range(300):
                runs = [await engine.get_run(run_id) for run_id in (kept, tied)]
                if all(r is not None and r.status == RunStatus.SUSPENDED for r in runs):
                    break
                await asyncio.sleep(0.05)
            assert await engine.cancel("k-1") is True
            cancelled = await engine.wait_for_run(tied, timeout=10)
            await engine.signal(kept, "done", "still here")
            done = await engine.wait_for_run(kept, timeout=30)
    finally:
        await transport.purge()
        await transport.close()
    assert cancelled.status == RunStatus.CANCELLED and not cancelled.detached
    assert (done.status, done.output, done.detached) == (RunStatus.COMPLETED, "still here", True)


# ---------------------------------------------------------------- payloads encrypted


def _order_engine(store: Store, transport: RedisTransport, keys: list[bytes]) -> Engine:
    return Engine(
        store,
        transport=transport,
        poll_interval=0.1,
        remote_workflows=[
            RemoteWorkflow("js-order", group="node-wf"),
            RemoteWorkflow("js-child", group="node-wf"),
        ],
        codec=Fernet(keys),
    )


async def test_a_node_worker_with_the_engines_keys_works_on_encrypted_payloads(
    store: Store, prefix: str, start_node: Callable[..., subprocess.Popen[str]]
) -> None:
    old, new = FernetKeys.generate_key(), FernetKeys.generate_key()
    worker = start_node([new, old])  # a rotation: the engine writes under the new key
    transport = RedisTransport(REDIS_URL, prefix=prefix)
    engine = _order_engine(store, transport, [new, old])
    try:
        async with engine:
            await engine.start("js-order", {"name": "ada"}, run_id="enc-1")
            await _until_waiting_for_signal(engine, "enc-1", worker)
            await engine.signal("enc-1", "ship", "by sea")
            done = await engine.wait_for_run("enc-1", timeout=30)
    finally:
        await transport.purge()
        await transport.close()
    assert done.status == RunStatus.COMPLETED, done.error
    assert {k: done.output[k] for k in ("greeting", "loud", "said", "child")} == {
        "greeting": "hello ada",
        "loud": "HELLO ADA",
        "said": "by sea",
        "child": "BY SEA",
    }
    stored = await unwrapped(engine.store).list_steps("enc-1")
    step = next(s for s in stored if s.kind == "step")
    assert set(step.input) == set(step.output) == {ENCODED}  # as the Node worker sealed them


async def test_a_node_worker_with_another_key_fails_the_run_naming_it(
    store: Store, prefix: str, start_node: Callable[..., subprocess.Popen[str]]
) -> None:
    start_node([FernetKeys.generate_key()])
    transport = RedisTransport(REDIS_URL, prefix=prefix)
    engine = _order_engine(store, transport, [FernetKeys.generate_key()])
    try:
        async with engine:
            await engine.start("js-order", {"name": "ada"}, run_id="enc-2")
            done = await engine.wait_for_run("enc-2", timeout=30)
    finally:
        await transport.purge()
        await transport.close()
    assert done.status == RunStatus.FAILED
    assert done.error is not None and done.error["type"] == "PayloadCodecError"
    assert "run 'enc-2'" in done.error["message"]
