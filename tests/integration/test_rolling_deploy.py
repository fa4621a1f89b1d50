"""A rolling deploy on real processes: three engines and two worker processes on release 1
(tests/integration/deploy_app.py) are stopped and started again on release 2 one at a time,
on a PostgreSQL and a Redis of the test's own, while starts and signals go on.

Release 2 patches a local and a remote workflow, adds a version of one workflow and a workflow
of its own. Every run must end as its code decides: completed, none dead or failed (no
``NonDeterminismError``), each run's patched branch taken exactly when the code that first
reached the patch knew it, each version's runs decided by that version's code, a workflow only
release 2 has run only once an engine of release 2 is up, and no two runs of one singleton
lane inside their bodies at once.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from runlane import Engine
from runlane.stores.postgres import PostgresStore
from tests.helpers import snapshot
from tests.servers import PrivatePostgres, PrivateRedis, spawn_ready

from . import deploy_app

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

APP = deploy_app.__name__
MEMBERS = ["engine-0", "worker-0", "engine-1", "worker-1", "engine-2"]
BETWEEN = 2.0  # seconds between two members' restarts
SETTLE = 90.0  # seconds every run has to end once the starts stop


@dataclass
class Cluster:
    pg_url: str
    redis_url: str
    prefix: str
    root: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    releases: dict[str, str] = field(default_factory=dict)

    def spawn(self, name: str, release: str) -> None:
        role = name.split("-")[0]
        command = [sys.executable, "-m", APP, role, release, self.pg_url, self.redis_url]
        command += [self.prefix, str(self.root / "effects.log")]
        self.procs[name] = spawn_ready(command, self.root / f"{name}.out")
        self.releases[name] = release

    def redeploy(self, name: str, release: str) -> None:
        """A graceful restart on ``release``: SIGTERM (the member drains), then start it again."""
        proc = self.procs[name]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, (self.root / f"{name}.out").read_text()[-2000:]
        self.spawn(name, release)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@dataclass
class Producer:
    """Starts runs the way a web tier does, on the release it is deployed with."""

    cluster: Cluster
    release: str = "1"
    started: dict[str, str] = field(default_factory=dict)  # run id -> release that started it
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        engines = {r: self._engine(r) for r in ("1", "2")}
        for engine in engines.values():
            await engine.__aenter__()
        try:
            n = 0
            while not self.stop.is_set():
                await self._start_round(engines, self.release, n)
                n += 1
                await asyncio.sleep(0.15)
            await asyncio.sleep(1.2)  # the last signals
        finally:
            for engine in engines.values():
                await engine.__aexit__(None, None, None)

    def _engine(self, release: str) -> Engine:
        c = self.cluster
        return deploy_app.engine(
            release, c.pg_url, c.redis_url, c.prefix, drive=False, consumers="never"
        )

    async def _start_round(self, engines: dict[str, Engine], release: str, n: int) -> None:
        # A round is the release it began on: the deploy may flip ``self.release`` mid-round.
        engine = engines[release]
        starts = [("deploy.order", f"o-{n}"), ("deploy.remote", f"r-{n}")]
        starts += [("deploy.report", f"p-{n}"), ("deploy.lane", f"l-{n}")]
        if release == "2":
            starts.append(("deploy.fresh", f"f-{n}"))
        for workflow, run_id in starts:
            await engine.start(workflow, {"lane": f"lane-{n % 3}"}, run_id=run_id)
            self.started[run_id] = release
        asyncio.get_running_loop().call_later(
            1.0, lambda: asyncio.ensure_future(engine.signal(f"o-{n}", "go", n))
        )


@pytest.fixture
def cluster(tmp_path: Path) -> Any:
    pg, redis = PrivatePostgres(), PrivateRedis()
    pg.start()
    redis.start()
    made = Cluster(
        pg.create_database("deploy"), redis.url, f"deploy-{uuid.uuid4().hex[:6]}", tmp_path
    )
    try:
        asyncio.run(_migrate(made.pg_url))
        yield made
    finally:
        made.stop()
        redis.stop()
        pg.destroy()


async def _migrate(url: str) -> None:
    store = PostgresStore(url)
    await store.open()
    await store.close()


async def test_a_rolling_deploy_loses_no_run_and_each_run_keeps_the_code_it_began_on(
    cluster: Cluster,
) -> None:
    for name in MEMBERS:
        cluster.spawn(name, "1")
    producer = Producer(cluster)
    producing = asyncio.create_task(producer.run())
    await asyncio.sleep(BETWEEN)
    for i, name in enumerate(MEMBERS):
        await asyncio.to_thread(cluster.redeploy, name, "2")
        if i == 0:
            producer.release = "2"  # the web tier is deployed with the first engine
        await asyncio.sleep(BETWEEN)
    producer.stop.set()
    await producing
    runs = await _settled(cluster.pg_url, set(producer.started))
    effects = _effects(cluster.root / "effects.log")

    unfinished = {r.id: (r.status, r.error) for r in runs.values() if r.status != "completed"}
    assert not unfinished, unfinished
    assert set(runs) == set(producer.started)
    _check_patched_branches(runs, effects)
    for run in runs.values():
        if run.workflow == "deploy.report":
            assert run.version == producer.started[run.id]
            assert run.output == f"report {run.version}"
            # Version 1 is in both releases, so either may run it; only release 2 has version 2.
            steps = {"1": {"report"}, "2": {"report", "summary"}}[run.version]
            assert {e.label for e in effects[run.id]} == steps, (run.id, effects[run.id])
            if run.version == "2":
                assert {e.release for e in effects[run.id]} == {"2"}, (run.id, effects[run.id])
        if run.workflow == "deploy.fresh":
            assert {e.release for e in effects[run.id]} == {"2"}
    _check_lanes(runs, effects)


@dataclass(frozen=True)
class Effect:
    label: str
    pid: int
    release: str
    start: float
    end: float


def _effects(path: Path) -> dict[str, list[Effect]]:
    found: defaultdict[str, list[Effect]] = defaultdict(list)
    for line in path.read_text().splitlines():
        run_id, label, pid, release, start, end = line.split()
        found[run_id].append(Effect(label, int(pid), release, float(start), float(end)))
    return found


async def _settled(pg_url: str, ids: set[str]) -> dict[str, Any]:
    deadline = time.monotonic() + SETTLE
    while True:
        runs, _ = await snapshot(pg_url, steps=False)
        found = {r.id: r for r in runs if r.id in ids}
        if (len(found) == len(ids) and all(r.is_terminal for r in found.values())) or (
            time.monotonic() > deadline
        ):
            return found
        await asyncio.sleep(0.5)


def _check_patched_branches(runs: dict[str, Any], effects: dict[str, list[Effect]]) -> None:
    """A run takes the patched branch exactly when the code that reached the patch (the
    turn that ran its first step) knew it; both branches were taken."""
    branches: defaultdict[str, int] = defaultdict(int)
    for run in runs.values():
        if run.workflow not in ("deploy.order", "deploy.remote"):
            continue
        reserved = {e.release for e in effects[run.id] if e.label == "reserve"}
        branch = run.output["branch"]
        branches[branch] += 1
        audited = any(e.label == "audit" for e in effects[run.id])
        assert audited == (branch == "patched"), (run.id, effects[run.id])
        if len(reserved) == 1:  # a reserve run again by the other release could go either way
            assert branch == ("patched" if reserved == {"2"} else "old"), (run.id, reserved)
        if run.workflow == "deploy.order":
            assert run.output["said"] == int(run.id.split("-")[1])
    assert branches["old"] > 0 and branches["patched"] > 0, dict(branches)


def _check_lanes(runs: dict[str, Any], effects: dict[str, list[Effect]]) -> None:
    """No two runs of one lane inside their bodies (first enter to last leave) at once."""
    lanes: defaultdict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for run in runs.values():
        if run.workflow != "deploy.lane":
            continue
        mine = effects[run.id]
        inside = (
            min(e.start for e in mine if e.label == "enter"),
            max(e.end for e in mine if e.label == "leave"),
        )
        lanes[run.input["lane"]].append((*inside, run.id))
    for lane, bodies in lanes.items():
        bodies.sort()
        for (_, end, first), (start, _, second) in itertools.pairwise(bodies):
            assert start >= end, f"{lane}: {first} and {second} overlapped"
