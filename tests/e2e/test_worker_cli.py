"""`runlane worker APP` runs a remote step Worker in its own process until SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from runlane import Engine, Run, RunStatus
from runlane.stores import MemoryStore
from runlane.transports import RedisTransport

from . import remote_app

HERE = Path(__file__).parent


def test_a_worker_process_executes_remote_steps_and_drains_on_sigterm() -> None:
    prefix = f"rl-e2e-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "RUNLANE_TEST_PREFIX": prefix, "PYTHONPATH": str(HERE)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from runlane.cli import main; main()",
            "worker",
            "remote_app:billing",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        output = asyncio.run(_pay_through(prefix))
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "stopped" in err
    assert output["charged"] == 42 and output["pid"] == proc.pid


def test_the_worker_command_turns_on_the_consumers_of_an_engine_built_as_a_producer(
    tmp_path: Path,
) -> None:
    # remote_app:both is an engine built consumers="never" and a worker, in one process. Unless
    # the command turns the engine's consumers on, the worker charges but the engine never takes
    # the result: the run would wait for a reconcile, minutes away.
    prefix = f"rl-e2e-{uuid.uuid4().hex[:8]}"
    db = f"sqlite:///{tmp_path / 'both.db'}"
    asyncio.run(_start_pay(prefix, db))
    path = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "RUNLANE_TEST_PREFIX": prefix, "RUNLANE_TEST_DB": db, "PYTHONPATH": path}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from runlane.cli import main; main()", "worker", "remote_app:both"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        run = asyncio.run(_wait_for_pay(prefix, db))
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert run.status == RunStatus.COMPLETED, (run.status, err[-2000:])
    assert run.output == {"charged": 7, "pid": proc.pid}


def _producer(db: str, transport: RedisTransport) -> Engine:
    return Engine(
        db, transport=transport, workflows=[remote_app.pay], drive=False, consumers="never"
    )


async def _start_pay(prefix: str, db: str) -> None:
    transport = RedisTransport(remote_app.REDIS_URL, prefix=prefix)
    try:
        async with _producer(db, transport) as engine:
            await engine.start(remote_app.pay, {"amount": 7}, run_id="pay-both")
    finally:
        await transport.close()


async def _wait_for_pay(prefix: str, db: str) -> Run:
    transport = RedisTransport(remote_app.REDIS_URL, prefix=prefix)
    try:
        async with _producer(db, transport) as engine:
            return await engine.wait_for_run("pay-both", timeout=20)
    finally:
        await transport.purge()
        await transport.close()


async def _pay_through(prefix: str) -> dict[str, int]:
    transport = RedisTransport(remote_app.REDIS_URL, prefix=prefix)
    engine = Engine(
        MemoryStore(), transport=transport, workflows=[remote_app.pay], poll_interval=0.2
    )
    try:
        async with engine:
            await engine.start(remote_app.pay, {"amount": 42}, run_id="pay-1")
            run = await engine.wait_for_run("pay-1", timeout=30)
        assert run.status == RunStatus.COMPLETED, run.error
        return dict(run.output)
    finally:
        await transport.purge()
        await transport.close()
