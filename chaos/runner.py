"""``make chaos``: one chaos run, from servers to verdict.

Environment: ``CHAOS_SECONDS`` (the budget of faults, 300 by default), ``CHAOS_SEED`` (random
by default; always printed), ``CHAOS_REPORT`` (where the report goes; RELIABILITY.md at the
repository root by default), ``CHAOS_STANDBY`` (``sync`` or ``async``: the database is a
primary and a standby streaming from it, reached through a multi-host URL, and "failover" joins
the faults; none by default), ``CHAOS_STANDBY_LAG`` (seconds an asynchronous standby stops
receiving before each failover's crash; 0 by default), ``CHAOS_FAULTS`` (the fault kinds to
draw from, comma-separated; all of the topology's by default). Exits 1 when any invariant count
is not zero.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict

from runlane.stores.postgres import PostgresStore
from tests.helpers import snapshot
from tests.servers import REPO, PrivatePostgres, PrivateRedis, ReplicatedPostgres, spawn_ready

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
)
from .config import Config
from .failover import read_state
from .faults import Injector, kinds_for
from .fleet import Fleet
from .proxy import Proxy

ENGINES = 3
WORKERS = 2
DRAIN = 120.0
"""Seconds every run has, once the faults stop, to end; a run still active then is stuck."""

PRODUCER_GRACE = 150.0
"""Seconds the producer has after the budget for its last signals and cancels."""

STANDBYS = ("", "sync", "async")


@dataclass(frozen=True)
class Options:
    """What a chaos run is asked to do (see the module's docstring)."""

    seconds: float
    seed: int
    report: Path
    standby: str = ""
    lag: float = 0.0
    faults: tuple[str, ...] = ()  # none named: every kind of the topology
    drain: float = DRAIN

    @classmethod
    def from_env(cls) -> Options:
        seed = os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(1 << 32)
        faults = os.environ.get("CHAOS_FAULTS") or ""
        return cls(
            seconds=float(os.environ.get("CHAOS_SECONDS") or 300),
            seed=int(seed),
            report=Path(os.environ.get("CHAOS_REPORT") or REPO / "RELIABILITY.md"),
            standby=os.environ.get("CHAOS_STANDBY") or "",
            lag=float(os.environ.get("CHAOS_STANDBY_LAG") or 0),
            faults=tuple(kind.strip() for kind in faults.split(",") if kind.strip()),
        ).checked()

    def checked(self) -> Options:
        """These options, or ``ValueError`` naming the one that cannot be run."""
        if self.standby not in STANDBYS:
            raise ValueError(f"CHAOS_STANDBY={self.standby!r}: use sync or async")
        if self.lag and self.standby != "async":
            raise ValueError("CHAOS_STANDBY_LAG needs CHAOS_STANDBY=async")
        unknown = set(self.faults) - set(self.kinds)
        if unknown:
            raise ValueError(f"CHAOS_FAULTS: no fault {sorted(unknown)} here; {self.kinds}")
        return self

    @property
    def kinds(self) -> tuple[str, ...]:
        return kinds_for(bool(self.standby))


@dataclass(frozen=True)
class Outcome:
    findings: Findings
    evidence: Evidence
    injector: Injector
    run: report.Run


def main() -> int:
    try:
        options = Options.from_env()
    except ValueError as exc:
        print(f"chaos: {exc}", file=sys.stderr)
        return 2
    outcome = run_chaos(options)
    if outcome.findings.failed:
        print(report.offenders(outcome.findings), flush=True)
        print(f"chaos: FAILED, seed {options.seed}", flush=True)
        return 1
    print(f"chaos: every invariant at zero, seed {options.seed}", flush=True)
    return 0


def run_chaos(options: Options) -> Outcome:
    """One chaos run: servers, fleet, faults, drain, checker; the report written."""
    seed, seconds = options.seed, options.seconds
    topology = f", standby {options.standby}" if options.standby else ""
    print(
        f"chaos: seed {seed}, {seconds:.0f} s{topology} (CHAOS_SEED={seed} to replay)", flush=True
    )
    began, when = time.monotonic(), datetime.now(UTC).strftime("%Y-%m-%d %H:%M")
    root = Path(tempfile.mkdtemp(prefix="runlane-chaos-"))
    pg = _postgres(options.standby)
    redis = PrivateRedis()
    proxy = Proxy(redis.port)
    try:
        pg.start()
        redis.start()
        proxy.start()
        config = Config(pg.create_database("chaos"), proxy.url, "chaos", str(root), seed, seconds)
        fleet = Fleet(config.save(), root)
        database = str(conninfo_to_dict(config.pg_url)["dbname"])
        injector = Injector(
            random.Random(seed),
            fleet,
            pg,
            redis,
            proxy,
            database,
            root / "faults.jsonl",
            kinds=options.faults or options.kinds,
            lag=options.lag,
        )
        findings, evidence, drained = _run(config, injector, options.drain)
    finally:
        proxy.stop()
        redis.stop()
        pg.destroy()
    run = report.Run(seed, seconds, drained, time.monotonic() - began, when, options.standby)
    options.report.write_text(report.render(run, evidence, findings, injector))
    print(f"chaos: report in {options.report}; logs in {root}", flush=True)
    return Outcome(findings, evidence, injector, run)


def _postgres(standby: str) -> PrivatePostgres | ReplicatedPostgres:
    return ReplicatedPostgres(synchronous=standby == "sync") if standby else PrivatePostgres()


def _run(
    config: Config, injector: Injector, drain: float
) -> tuple[Findings, Evidence, float | None]:
    asyncio.run(_migrate(config.pg_url))
    fleet = injector.fleet
    producer: subprocess.Popen[bytes] | None = None
    try:
        fleet.start(ENGINES, WORKERS)
        command = [sys.executable, "-m", "chaos.app", "producer", str(fleet.config)]
        producer = spawn_ready(command, config.root / "producer.out")
        injector.run(config.seconds)
        print("chaos: faults stopped; waiting for every run to end", flush=True)
        deadline = time.monotonic() + drain
        _wait_producer(producer, fleet)
        fleet.revive_the_dead()
        drained = asyncio.run(_drain(config, deadline, drain))
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
        crashes=injector.crashes,
        final=read_state(config.pg_url) if injector.crashes else None,
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


async def _drain(config: Config, deadline: float, drain: float) -> float | None:
    """Seconds from the end of the faults (``drain`` before the deadline) until every run in
    the store is terminal; None when some run is not by the deadline. The producer has ended,
    so every start it acknowledged was committed before this: one the store lacks now was lost
    (an asynchronous standby's failover), and no wait brings it back; the checker counts it."""
    began = deadline - drain
    while time.monotonic() < deadline:
        runs, _ = await snapshot(config.pg_url, steps=False)
        if all(r.is_terminal for r in runs):
            return time.monotonic() - began
        await asyncio.sleep(1.0)
    return None
