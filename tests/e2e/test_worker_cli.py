"""`runlane worker APP` runs a remote step Worker in its own process until SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from runlane import Engine, RunStatus
from runlane.stores import MemoryStore

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


async def _pay_through(prefix: str) -> dict[str, int]:
    from runlane.transports import RedisTransport

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
