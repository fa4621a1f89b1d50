"""``make chaos``: one chaos run, from servers to verdict.

Environment: ``CHAOS_SECONDS`` (the budget of faults, 300 by default), ``CHAOS_SEED`` (random
by default; always printed), ``CHAOS_REPORT`` (where the report goes; RELIABILITY.md at the
repository root by default). Exits 1 when any invariant count is not zero.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from runlane.stores.postgres import PostgresStore
from tests.helpers import snapshot
from tests.servers import REPO, PrivatePostgres, PrivateRedis, spawn_ready

from . import report
from .check import (
    Evidence,
    Findings,
    Freeze,
    QueueAdmission,
    QueueEntry,
    check,
    read_executions,
    read_record,
    started,
)
from .config import Config
from .faults import Injector
from .fleet import Fleet
from .proxy import Proxy

ENGINES = 3
WORKERS = 2
DRAIN = 120.0
"""Seconds every run has, once the faults stop, to end; a run still active then is stuck."""

PRODUCER_GRACE = 150.0
"""Seconds the producer has after the budget for its last signals and cancels."""


def main() -> int:
    seconds = float(os.environ.get("CHAOS_SECONDS") or 300)
    seed = int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(1 << 32))
    target = Path(os.environ.get("CHAOS_REPORT") or REPO / "RELIABILITY.md")
    print(f"chaos: seed {seed}, {seconds:.0f} s (CHAOS_SEED={seed} to replay)", flush=True)
    began, when = time.monotonic(), datetime.now(UTC).strftime("%Y-%m-%d %H:%M")
    root = Path(tempfile.mkdtemp(prefix="runlane-chaos-"))
    pg, redis = PrivatePostgres(), PrivateRedis()
    proxy = Proxy(redis.port)
    try:
        pg.start()
        redis.start()
        proxy.start()
        config = Config(pg.create_database("chaos"), proxy.url, "chaos", str(root), seed, seconds)
        fleet = Fleet(config.save(), root)
        database = config.pg_url.rsplit("/", 1)[1]
        injector = Injector(
            random.Random(seed), fleet, pg, redis, proxy, database, root / "faults.jsonl"
        )
        findings, evidence, drained = _run(config, injector)
    finally:
        proxy.stop()
        redis.stop()
        pg.destroy()
    run = report.Run(seed, seconds, drained, time.monotonic() - began, when)
    target.write_text(report.render(run, evidence, findings, injector))
    print(f"chaos: report in {target}; logs in {root}", flush=True)
    if findings.failed:
        print(report.offenders(findings), flush=True)
        print(f"chaos: FAILED, seed {seed}", flush=True)
        return 1
    print(f"chaos: every invariant at zero, seed {seed}", flush=True)
    return 0


def _run(config: Config, injector: Injector) -> tuple[Findings, Evidence, float | None]:
    asyncio.run(_migrate(config.pg_url))
    fleet = injector.fleet
    producer: subprocess.Popen[bytes] | None = None
    try:
        fleet.start(ENGINES, WORKERS)
        command = [sys.executable, "-m", "chaos.app", "producer", str(fleet.config)]
        producer = spawn_ready(command, config.root / "producer.out")
        injector.run(config.seconds)
        print("chaos: faults stopped; waiting for every run to end", flush=True)
        deadline = time.monotonic() + DRAIN
        _wait_producer(producer, fleet)
        fleet.revive_the_dead()
        drained = asyncio.run(_drain(config, deadline))
    finally:
        # Also when the run itself failed: no member may outlive it.
        if producer is not None and producer.poll() is None:
            producer.kill()
        fleet.stop()
    runs, steps = asyncio.run(snapshot(config.pg_url))
    evidence = Evidence(
        runs={r.id: r for r in runs},
        steps=steps,
        executions=read_executions(config.root),
        record=read_record(config.root),
        freezes=[Freeze(*f) for f in injector.freezes],
        releases=dict(fleet.release_of),
        died=fleet.died,
        admissions=_admissions(config.pg_url),
        entries=_entries(config.pg_url),
    )
    return check(evidence), evidence, drained


def _wait_producer(producer: subprocess.Popen[bytes], fleet: Fleet) -> None:
    try:
        code = producer.wait(PRODUCER_GRACE)
    except subprocess.TimeoutExpired:
        producer.kill()
        code = producer.wait()
    if code != 0:
        fleet.died.append(("producer", producer.pid, code))


# Every step queue admission the store commits, logged by the database itself: the entry's row
# is deleted when its slot is freed, so the checker could not count a rate window otherwise.
# The log is written in the admitting transaction, so an admission rolled back leaves no line.
AUDIT = """
CREATE TABLE chaos_admissions (
    queue text NOT NULL, run_id text NOT NULL, seq integer NOT NULL,
    admitted_at timestamptz NOT NULL);
CREATE FUNCTION chaos_admitted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_admissions VALUES (NEW.queue, NEW.run_id, NEW.seq, NEW.admitted_at);
    RETURN NULL;
END $$;
CREATE TRIGGER chaos_admitted AFTER UPDATE OF admitted_at ON runlane_queue_entries
    FOR EACH ROW WHEN (OLD.admitted_at IS NULL AND NEW.admitted_at IS NOT NULL)
    EXECUTE FUNCTION chaos_admitted();
CREATE TRIGGER chaos_admitted_at_once AFTER INSERT ON runlane_queue_entries
    FOR EACH ROW WHEN (NEW.admitted_at IS NOT NULL) EXECUTE FUNCTION chaos_admitted();
"""


async def _migrate(url: str) -> None:
    # Once, before the fleet opens the database all at once.
    store = PostgresStore(url)
    await store.open()
    await store.close()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(AUDIT)


def _admissions(url: str) -> list[QueueAdmission]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT queue, run_id, seq, admitted_at FROM chaos_admissions")
        return [QueueAdmission(*row) for row in rows.fetchall()]


def _entries(url: str) -> list[QueueEntry]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT queue, run_id, seq, admitted_at IS NOT NULL FROM runlane_queue_entries"
            " ORDER BY run_id, seq"
        )
        return [QueueEntry(*row) for row in rows.fetchall()]


async def _drain(config: Config, deadline: float) -> float | None:
    """Seconds from the end of the faults (``DRAIN`` before the deadline) until every run is
    terminal; None when some run is not by the deadline."""
    began = deadline - DRAIN
    while time.monotonic() < deadline:
        runs, _ = await snapshot(config.pg_url, steps=False)
        acknowledged = set(started(read_record(config.root)))
        if acknowledged <= {r.id for r in runs} and all(r.is_terminal for r in runs):
            return time.monotonic() - began
        await asyncio.sleep(1.0)
    return None
