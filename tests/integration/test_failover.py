"""A fleet's database fails over to a streaming standby: every entry point takes the multi-host
URL, reconnects land on the new primary, and no write ever goes to a read-only server.

Each test builds its own primary and standby (``tests.servers.ReplicatedPostgres``), never
touching the machine's PostgreSQL.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
from click.testing import CliRunner

import runlane
from chaos.report import offenders
from chaos.runner import Options, run_chaos
from runlane import Engine, RunStatus
from runlane.cli import main
from runlane.faults import is_infrastructure
from runlane.stores import open_store
from runlane.stores.postgres import PostgresStore
from runlane.transports import DbTransport, open_transport

from ..helpers import settled
from ..servers import ReplicatedPostgres

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(180)]

T = TypeVar("T")


executed: Counter[str] = Counter()


@runlane.step(name="fo.work")
async def work(args: list[Any]) -> int:
    run_id, n = args
    executed[f"{run_id}:{n}"] += 1
    await asyncio.sleep(0.1)
    return int(n) * 2


@runlane.workflow(name="fo.two")
async def two(ctx: runlane.Context, n: int) -> list[int]:
    return [await ctx.step(work, [ctx.run_id, n]), await ctx.step(work, [ctx.run_id, n + 1])]


def replicated(synchronous: bool) -> Iterator[ReplicatedPostgres]:
    servers = ReplicatedPostgres(synchronous=synchronous)
    try:
        servers.start()
        yield servers
    finally:
        servers.destroy()


@pytest.fixture
def pair() -> Iterator[ReplicatedPostgres]:
    """A primary and an asynchronous standby of the test's own."""
    yield from replicated(synchronous=False)


@pytest.fixture
def sync_pair() -> Iterator[ReplicatedPostgres]:
    """A primary and a synchronous standby of the test's own."""
    yield from replicated(synchronous=True)


async def through_outage(call: Callable[[], Awaitable[T]], seconds: float = 30.0) -> T:
    """``call()``, tried again while it meets an outage (a store's or a transport's); the
    outage's last error when it lasts ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return await call()
        except Exception as exc:
            if not is_infrastructure(exc) or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


def fence_read_only(url: str) -> None:
    """Every session of the server at ``url`` read-only from its next transaction: how a
    demoted primary that stays up is fenced."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
        conn.execute("SELECT pg_reload_conf()")


def server_port(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return int(conn.info.port)


async def test_a_pooled_connection_to_a_server_turned_read_only_is_dropped_for_the_primary(
    pair: ReplicatedPostgres,
) -> None:
    url = pair.create_database("failover")
    engine = Engine(PostgresStore(url), workflows=[two], drive=False)
    async with engine:
        await engine.start(two, 1, run_id="before")
        pair.wait_caught_up()
        fence_read_only(pair.primary.url)
        old = pair.primary
        pair.standby.promote()
        # The pool's connections to the fenced server are alive and would refuse every write.
        run = await through_outage(lambda: engine.start(two, 2, run_id="after"))
        assert run.status == RunStatus.PENDING
    assert server_port(url) == pair.standby.port != old.port
    with psycopg.connect(url, autocommit=True) as conn:
        ids = conn.execute("SELECT id FROM runlane_runs ORDER BY id").fetchall()
    assert [row[0] for row in ids] == ["after", "before"]


async def test_the_db_transport_drops_a_connection_to_a_server_turned_read_only(
    pair: ReplicatedPostgres,
) -> None:
    url = pair.create_database("failover")
    transport = DbTransport(url, prefix="fo", poll_interval=0.1)
    await transport.open()
    try:
        await transport.send_tasks("g", [{"n": 1}])
        assert await transport.take_tasks("g", 10, timeout=5) == [{"n": 1}]  # LISTENs to "g"
        pair.wait_caught_up()
        fence_read_only(pair.primary.url)
        pair.standby.promote()
        await through_outage(lambda: transport.send_tasks("g", [{"n": 2}]))
        taken = await transport.take_tasks("g", 10, timeout=5)
        # The LISTEN connection moved too: notifications come from the new primary.
        listening = await asyncio.to_thread(wait_for_listener, pair.standby.url)
    finally:
        await transport.close()
    assert taken == [{"n": 2}]
    assert listening.startswith("LISTEN"), listening


def wait_for_listener(admin_url: str, seconds: float = 10.0) -> str:
    """The query of a session that LISTENs on the server at ``admin_url``, once there is one."""
    deadline = time.monotonic() + seconds
    found: tuple[str] | None = None
    while found is None and time.monotonic() < deadline:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            found = conn.execute(
                "SELECT query FROM pg_stat_activity WHERE query LIKE 'LISTEN %' LIMIT 1"
            ).fetchone()
        time.sleep(0.05)
    return found[0] if found else "no session listens"


def standby_first(pair: ReplicatedPostgres, database: str) -> str:
    """The database's URL with the standby listed first and no ``target_session_attrs``: libpq
    alone would connect to the standby."""
    hosts = f"127.0.0.1:{pair.standby.port},127.0.0.1:{pair.primary.port}"
    return f"postgresql://postgres@{hosts}/{database}"


def test_every_entry_point_reaches_the_primary_whichever_host_the_url_lists_first(
    pair: ReplicatedPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = standby_first(pair, "postgres")
    upgraded = CliRunner().invoke(main, ["db", "upgrade", url])
    assert upgraded.exit_code == 0, upgraded.output
    assert "postgresql schema up to date" in upgraded.output

    async def start_and_settle() -> Any:
        engine = Engine(open_store(url), transport=open_transport(url), workflows=[two])
        async with engine:
            run = await engine.start(two, 3, run_id="multi")
            return (await settled(engine, run.id)).output

    assert asyncio.run(start_and_settle()) == [6, 8]
    monkeypatch.setenv("RUNLANE_DATABASE_URL", url)
    listed = CliRunner().invoke(main, ["runs", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    assert '"id": "multi"' in listed.output
    assert server_port(pair.url) == pair.primary.port


async def test_runs_in_flight_through_a_crash_and_a_promotion_all_complete_once_each(
    sync_pair: ReplicatedPostgres,
) -> None:
    """The primary stops as in a crash while runs start and execute, and the synchronous
    standby is promoted (its commits wait until a new standby streams): the engine's store and
    db transport reconnect to it, every run started completes, each step executed at most
    twice (the step in flight)."""
    executed.clear()
    url = sync_pair.create_database("failover")
    engine = Engine(
        PostgresStore(url),
        transport=DbTransport(url, poll_interval=0.2),
        workflows=[two],
        lease=2.0,
        poll_interval=0.1,
    )
    async with engine:
        stop = asyncio.Event()
        producing = asyncio.create_task(produce(engine, stop))
        await asyncio.sleep(1.0)
        crashed = time.monotonic()
        await asyncio.to_thread(sync_pair.failover)
        await asyncio.to_thread(sync_pair.rebuild_standby)
        rebuilt = time.monotonic()
        await asyncio.sleep(1.0)  # starts on the new primary, streaming to its new standby
        stop.set()
        started, spans = await producing
        done = [await settled(engine, run_id, timeout=60) for run_id in started]
    assert [r.output for r in done] == [[2 * n, 2 * n + 2] for n in range(len(started))]
    assert max(executed.values()) <= 2, executed.most_common(3)
    assert server_port(url) == sync_pair.primary.port
    # The burst met the failover: a start was in flight while the primary was down, or while
    # the promoted standby's commits waited for a standby of its own.
    assert any(asked < rebuilt and answered > crashed for asked, answered in spans), spans
    longest = max(answered - asked for asked, answered in spans)
    print(
        f"\n{len(started)} runs; the failover took {rebuilt - crashed:.1f} s, the longest start"
        f" {longest:.1f} s; {sum(executed.values())} executions of {2 * len(started)} steps"
    )


async def produce(
    engine: Engine, stop: asyncio.Event
) -> tuple[list[str], list[tuple[float, float]]]:
    """Start runs until ``stop``, each retried through the outage: their ids, and when each
    start was asked and answered."""
    started, spans = list[str](), list[tuple[float, float]]()
    while not stop.is_set():
        n, asked = len(started), time.monotonic()
        run = await through_outage(functools.partial(engine.start, two, n, run_id=f"r{n:04d}"))
        spans.append((asked, time.monotonic()))
        started.append(run.id)
        await asyncio.sleep(0.01)
    return started, spans


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_fleet_through_synchronous_failovers_keeps_every_invariant_and_loses_nothing(
    tmp_path: Path,
) -> None:
    """The chaos fleet (three engines, two workers, the producer's mixed workload) on a
    primary and a synchronous standby, failed over every few seconds: every invariant holds,
    every acknowledged start exists, every run completes, no step runs more than twice, and
    of what an old primary had committed, the store lacks only writes still in flight."""
    options = Options(30, 37, tmp_path / "report.md", "sync", faults=("failover",))
    outcome = run_chaos(options)
    assert outcome.injector.counts["failover"] >= 3, outcome.injector.counts
    assert not outcome.findings.failed, offenders(outcome.findings)
    assert outcome.findings.losses.acknowledged == []
    assert outcome.run.drained_in is not None


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_asynchronous_failovers_lose_acknowledged_commits_but_not_exclusion_quotas_or_fifo(
    tmp_path: Path,
) -> None:
    """The same fleet on an asynchronous standby cut off 1 s before each crash, so the old
    primary's last second is lost: acknowledged starts vanish, checkpoints are lost (their
    steps run again) and settlements too (their runs resume). The history the store keeps
    still has no two runs of a singleton key at once, no quota exceeded, no waiter admitted
    before an older one."""
    options = Options(30, 37, tmp_path / "report.md", "async", 1.0, ("failover",), drain=40)
    outcome = run_chaos(options)
    lost = outcome.findings.losses
    assert outcome.injector.counts["failover"] >= 3, outcome.injector.counts
    assert lost.runs and lost.records and lost.settlements, lost
    assert outcome.findings.offences["lost"]  # acknowledged starts among them
    kept = outcome.findings.kept
    assert kept is not None
    assert not (kept.offences["overlap"] or kept.offences["fifo"] or kept.offences["quota"]), (
        offenders(kept)
    )
