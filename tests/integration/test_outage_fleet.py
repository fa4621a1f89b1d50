"""Outages of real servers under a fleet of real processes: no run's outcome is the plumbing's.

Three engine processes and two workers, on a PostgreSQL server and a Redis server that the test
started itself (never the machine's own services), run a few hundred runs: plain ones, runs of
one singleton key, and runs with a remote step. Meanwhile the database's backends are
terminated every 1.5 s for 12 s, or PostgreSQL is restarted as after a crash, or Redis is
restarted (losing every message it held). Afterwards every run has completed with its output,
each checkpoint exists once, no step ran more than twice, and the key's bodies never overlapped.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runlane import Engine, RunStatus, StoreUnavailableError
from runlane.stores.postgres import PostgresStore
from tests.helpers import snapshot
from tests.servers import PrivatePostgres, PrivateRedis, spawn_ready

from . import outage_app

APP = outage_app.__name__
# These tests kill the servers under the test process's own clients: a socket the server
# dropped mid-call is collected unclosed inside psycopg's and redis-py's asyncio code, which
# reports it as a ResourceWarning. Shown, not turned into errors, here only.
pytestmark = [
    pytest.mark.filterwarnings("default::ResourceWarning"),
    pytest.mark.filterwarnings("default::pytest.PytestUnraisableExceptionWarning"),
]
KINDS = {"o.plain": 120, "o.keyed": 30, "o.remote": 90}
WAVES = 10


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[PrivatePostgres, PrivateRedis]]:
    pg, redis = PrivatePostgres(), PrivateRedis()
    pg.start()
    redis.start()
    try:
        yield pg, redis
    finally:
        redis.stop()
        pg.destroy()


def _spawn(
    role: str, db_url: str, redis_url: str, prefix: str, log: Path
) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", APP, role, db_url, redis_url, prefix, str(log)]
    return spawn_ready(command, log.parent / f"{role}-{uuid.uuid4().hex[:6]}.out")


def _plan() -> list[tuple[str, str]]:
    runs = [(kind, f"{kind}-{n:03d}") for kind, count in KINDS.items() for n in range(count)]
    # Interleave the kinds, keeping each key's runs in start order.
    return sorted(runs, key=lambda r: (int(r[1].rsplit("-", 1)[1]) % WAVES, r[1]))


async def _start_all(db_url: str, redis_url: str, prefix: str) -> None:
    """A web process starting runs in waves, retrying a start the outage refused."""
    producer = outage_app.engine(db_url, redis_url, prefix, drive=False, consumers="never")
    plan = _plan()
    wave = len(plan) // WAVES + 1
    async with producer:
        for i in range(0, len(plan), wave):
            for kind, run_id in plan[i : i + wave]:
                await _start_one(producer, kind, run_id)
            await asyncio.sleep(0.7)


async def _start_one(producer: Engine, kind: str, run_id: str) -> None:
    for _ in range(200):
        try:
            await producer.start(kind, None, run_id=run_id)
            return
        except StoreUnavailableError:
            await asyncio.sleep(0.1)
    raise AssertionError(f"could not start {run_id} in 20 s")


def _wait_all_completed(db_url: str, timeout: float) -> list[Any]:
    deadline = time.monotonic() + timeout
    runs: list[Any] = []
    while time.monotonic() < deadline:
        try:
            runs, _ = asyncio.run(snapshot(db_url))
        except StoreUnavailableError:
            runs = []
        if len(runs) == sum(KINDS.values()) and all(r.is_terminal for r in runs):
            return runs
        time.sleep(0.5)
    return runs


class _Injector(threading.Thread):
    """Runs the faults beside the burst; what they did (or the error that stopped them) is
    checked afterwards, so a fault that never happened cannot pass for one survived."""

    def __init__(self, faults: Callable[[], str]) -> None:
        super().__init__(daemon=True)
        self._faults = faults
        self.done: str | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.done = self._faults()
        except BaseException as exc:
            self.error = exc

    def check(self) -> str:
        assert not self.is_alive(), "the faults were still being injected"
        if self.error is not None:
            raise AssertionError(f"injecting the faults failed: {self.error!r}") from self.error
        assert self.done, "no fault was injected"
        return self.done


def _fleet_under(
    servers: tuple[PrivatePostgres, PrivateRedis],
    tmp_path: Path,
    faults: Callable[[PrivatePostgres, PrivateRedis, str], str],
) -> None:
    pg, redis = servers
    db_url = pg.create_database("outage")
    database = db_url.rsplit("/", 1)[1]
    prefix = f"rlout-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "steps.log"
    log.touch()
    asyncio.run(PostgresStore(db_url).open())  # migrate before the fleet opens it at once
    procs = [_spawn("engine", db_url, redis.url, prefix, log) for _ in range(3)]
    procs += [_spawn("worker", db_url, redis.url, prefix, log) for _ in range(2)]
    try:
        injector = _Injector(lambda: faults(pg, redis, database))
        injector.start()
        asyncio.run(_start_all(db_url, redis.url, prefix))
        injector.join(60)
        injected = injector.check()
        runs = _wait_all_completed(db_url, 150)
        alive = [p.pid for p in procs if p.poll() is None]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=60)
    assert len(alive) == len(procs), f"processes died: {[p.pid for p in procs]} alive {alive}"
    _check(db_url, runs, log)
    outage_lines = sum(
        out.read_text(errors="replace").count("the store is unavailable")
        for out in tmp_path.glob("engine-*.out")
    )
    executions = len(log.read_text().splitlines())
    print(
        f"\n{len(runs)} runs completed under: {injected}; {executions} step executions for"
        f" {len(runs) * 3} steps; {outage_lines} outage warning(s) from the engines"
    )


def _check(db_url: str, runs: list[Any], log: Path) -> None:
    _, steps = asyncio.run(snapshot(db_url))
    unfinished = [
        (r.id, r.status, (r.error or {}).get("type"), str((r.error or {}).get("message"))[:120])
        for r in runs
        if r.status != RunStatus.COMPLETED
    ]
    assert len(runs) == sum(KINDS.values()), f"{len(runs)} runs found"
    assert not unfinished, f"{len(unfinished)} runs not completed: {unfinished[:5]}"
    for run in runs:
        records = steps[run.id]
        assert [s.seq for s in records] == [1, 2, 3], (run.id, records)
        assert all(s.status == "completed" for s in records), (run.id, records)
        assert run.output == [f"{run.id}:{seq}" for seq in (1, 2, 3)], run
    lines = [line.split() for line in log.read_text().splitlines()]
    executions = Counter((run, seq) for run, seq, *_ in lines)
    assert len(executions) == len(runs) * 3, "a step never ran"
    assert max(executions.values()) <= 2, [k for k, v in executions.items() if v > 2]
    # A keyed run holds its slot from its first step to its settlement: the spans of the
    # key's runs, from the first step's start to the last step's end, never overlap.
    spans: dict[str, tuple[float, float]] = {}
    for run, _, _, _, a, b in lines:
        if run.startswith("o.keyed-"):
            begin, finish = spans.get(run, (float(a), float(b)))
            spans[run] = (min(begin, float(a)), max(finish, float(b)))
    assert len(spans) == KINDS["o.keyed"], sorted(spans)
    overlaps, latest = [], (0.0, "")
    for run, (begin, finish) in sorted(spans.items(), key=lambda item: item[1]):
        if begin < latest[0]:
            overlaps.append((latest[1], run))
        latest = max(latest, (finish, run))
    assert not overlaps, f"the key's bodies overlapped: {overlaps}"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_backends_terminated_every_1_5_s_for_12_s_decide_no_run(
    servers: tuple[PrivatePostgres, PrivateRedis], tmp_path: Path
) -> None:
    def terminate(pg: PrivatePostgres, redis: PrivateRedis, database: str) -> str:
        killed = []
        for _ in range(8):
            time.sleep(1.5)
            killed.append(pg.terminate_backends(database))
        assert sum(killed) > 0, killed
        return f"backends terminated every 1.5 s for 12 s ({sum(killed)} in all: {killed})"

    _fleet_under(servers, tmp_path, terminate)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_postgres_restarted_as_after_a_crash_mid_burst_decides_no_run(
    servers: tuple[PrivatePostgres, PrivateRedis], tmp_path: Path
) -> None:
    def crash_restart(pg: PrivatePostgres, redis: PrivateRedis, database: str) -> str:
        time.sleep(3.0)
        pg.stop("immediate")
        time.sleep(1.0)
        pg.start()
        return "PostgreSQL stopped as by a crash at 3 s and started again 1 s later"

    _fleet_under(servers, tmp_path, crash_restart)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_redis_restarted_mid_burst_decides_no_run(
    servers: tuple[PrivatePostgres, PrivateRedis], tmp_path: Path
) -> None:
    def restart_redis(pg: PrivatePostgres, redis: PrivateRedis, database: str) -> str:
        time.sleep(3.0)
        redis.restart(down_for=1.0)
        return "Redis killed at 3 s (every message lost) and started again 1 s later"

    _fleet_under(servers, tmp_path, restart_redis)
