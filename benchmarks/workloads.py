"""runlane's side of the benchmark workloads (the peers' sides are in ``benchmarks/peers/``).

Run one or more workloads on one backend; every result is printed and appended to ``--json``
as one JSON line, ``{"workload": name, "db": db, ...figures}``::

    .venv/bin/python benchmarks/workloads.py --db sqlite --workloads throughput,latency

Each workload builds its own engine on a fresh store (a new SQLite file, or the PostgreSQL
database ``runlane_bench`` created again), so no workload sees another's rows.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import common
import remote
import seed
import start_cost
from peers.peerkit import CpuMark
from pgcount import count_statements
from roundtrips import RoundTripProxy

import runlane
from runlane import (
    Concurrency,
    ConcurrencyLimitError,
    Engine,
    RateLimit,
    RateLimitError,
    RunlaneError,
    Schedule,
    Singleton,
    StepQueue,
)
from runlane.models import RunQuery
from runlane.stores import MemoryStore
from runlane.stores.base import Store
from runlane.testing import ManualClock

Figures = dict[str, Any]

# ---------------------------------------------------------------- workflow definitions


@runlane.step(name="bench.noop")
async def noop(x: int) -> int:
    return x + 1


@runlane.workflow(name="bench.steps")
async def steps_wf(ctx: runlane.Context, n: int) -> int:
    x = 0
    for _ in range(n):
        x = await ctx.step(noop, x)
    return x


@runlane.workflow(name="bench.waiter")
async def waiter_wf(ctx: runlane.Context, _: Any) -> Any:
    return await ctx.wait_for_signal("go")


@runlane.workflow(name="bench.quota", concurrency=Concurrency(key="bench:full", limit=1))
async def quota_wf(ctx: runlane.Context, _: Any) -> Any:
    return await ctx.wait_for_signal("go")


@runlane.workflow(name="bench.rate", rate_limit=RateLimit(limit=1, period=3600))
async def rate_wf(ctx: runlane.Context, _: Any) -> Any:
    return None


@runlane.workflow(name="bench.lane", singleton=runlane.Singleton(key=lambda _: "one-key"))
async def lane_wf(ctx: runlane.Context, _: Any) -> Any:
    return await ctx.wait_for_signal("go")


@runlane.step(name="bench.sleep")
async def sleep_step(ms: float) -> None:
    await asyncio.sleep(ms / 1000)


@dataclass
class KeyProbe:
    """In-process record of who was inside a keyed body, and when (perf_counter seconds)."""

    inside: dict[str, int] = field(default_factory=dict)
    peak: dict[str, int] = field(default_factory=dict)
    entered: dict[str, tuple[str, float]] = field(default_factory=dict)  # run id -> (key, t)
    left: dict[str, float] = field(default_factory=dict)
    queued: dict[str, float] = field(default_factory=dict)  # run id -> when its start returned
    expected: int = 0
    all_left: asyncio.Event = field(default_factory=asyncio.Event)

    def enter(self, key: str, run_id: str) -> None:
        if run_id in self.entered:  # a replay of a run already inside
            return
        self.inside[key] = self.inside.get(key, 0) + 1
        self.peak[key] = max(self.peak.get(key, 0), self.inside[key])
        self.entered[run_id] = (key, time.perf_counter())

    def leave(self, key: str, run_id: str) -> None:
        self.left[run_id] = time.perf_counter()
        self.inside[key] -= 1
        if len(self.left) >= self.expected:
            self.all_left.set()


def keyed_workflow(probe: KeyProbe, step_ms: float) -> Callable[..., Any]:
    @runlane.workflow(name="bench.keyed", singleton=Singleton(key=lambda i: i["key"], limit=1))
    async def keyed(ctx: runlane.Context, i: dict[str, Any]) -> int:
        probe.enter(i["key"], ctx.run_id)
        await ctx.step(sleep_step, step_ms)
        probe.leave(i["key"], ctx.run_id)
        return int(i["seq"])

    return keyed


# ---------------------------------------------------------------- targets


@dataclass
class Target:
    """A fresh backend for one workload: how to build a store on it, and what it is."""

    db: str
    tmp: Path
    url: str = ""
    path: Path | None = None

    def renew(self) -> None:
        if self.db == "pg":
            self.url = common.fresh_pg()
        elif self.db == "sqlite":
            self.path = common.fresh_sqlite(self.tmp)

    def store(self) -> Store:
        if self.db == "pg":
            from runlane.stores.postgres import PostgresStore

            return PostgresStore(self.url)
        if self.db == "sqlite":
            from runlane.stores.sqlite import SqliteStore

            assert self.path is not None
            return SqliteStore(self.path)
        return MemoryStore()

    def engine(self, *workflows: Any, store: Store | None = None) -> Engine:
        return Engine(
            store or self.store(),
            workflows=list(workflows),
            steps=[noop, sleep_step],
            **codec_option(),
        )


def codec_option() -> dict[str, Any]:
    """``RUNLANE_BENCH_CODEC=fernet``: the engine encrypts every payload with a fresh Fernet key
    (what the codec costs: benchmarks/notes.md, "Payload codec"); unset, no codec is passed."""
    if os.environ.get("RUNLANE_BENCH_CODEC") != "fernet":
        return {}
    from cryptography.fernet import Fernet as FernetKeys

    from runlane.codecs import Fernet

    return {"codec": Fernet([FernetKeys.generate_key()])}


async def start_all(
    engine: Engine, workflow: Any, inputs: Sequence[Any], took: list[float] | None = None
) -> list[str]:
    """Start one run per input, one after another; each start's wall time (ms) into ``took``."""
    if took is None:
        return [(await engine.start(workflow, i)).id for i in inputs]
    ids = []
    for i in inputs:
        t0 = time.perf_counter()
        ids.append((await engine.start(workflow, i)).id)
        took.append((time.perf_counter() - t0) * 1000)
    return ids


async def start_batched(
    engine: Engine, workflow: Any, inputs: Sequence[Any], batch: int, took: list[float]
) -> list[str]:
    """Start one run per input, ``batch`` of them a ``start_many``; each call's wall time (ms)
    per start into ``took``."""
    ids: list[str] = []
    for first in range(0, len(inputs), batch):
        chunk = inputs[first : first + batch]
        t0 = time.perf_counter()
        outcomes = await engine.start_many([runlane.Start(workflow, i) for i in chunk])
        took.append((time.perf_counter() - t0) * 1000 / len(chunk))
        ids += [o.result().id for o in outcomes]
    return ids


async def wait_all(engine: Engine, ids: Sequence[str], timeout: float = 600) -> None:
    for run_id in ids:
        run = await engine.wait_for_run(run_id, timeout=timeout)
        if run.status != runlane.RunStatus.COMPLETED:
            raise RuntimeError(f"run {run_id} ended {run.status}: {run.error}")


async def warm_up(engine: Engine, steps: int = 2) -> None:
    await wait_all(engine, await start_all(engine, steps_wf, [steps] * 20))


# ---------------------------------------------------------------- 1. throughput


async def throughput(target: Target, n: int = 1000, steps: int = 2) -> Figures:
    target.renew()
    async with target.engine(steps_wf) as engine:
        await warm_up(engine, steps)
        figures = await timed_batch(engine, n, steps)
        return {**figures, **await idle_starts(engine, steps_wf, [steps] * 50)}


async def throughput_batched(
    target: Target, n: int = 1000, steps: int = 2, batch: int = 25
) -> Figures:
    """``throughput`` with its starts made ``batch`` at a time (``Engine.start_many``)."""
    target.renew()
    async with target.engine(steps_wf) as engine:
        await warm_up(engine, steps)
        return {**await timed_batch(engine, n, steps, batch), "batch": batch}


async def timed_batch(engine: Engine, n: int, steps: int, batch: int | None = None) -> Figures:
    # On PostgreSQL, the server's CPU too: its backends serving the bench database.
    database = (
        common.PG_DB if str(getattr(engine.store, "url", "")).startswith("postgres") else None
    )
    cpu0, t0 = CpuMark(database), time.perf_counter()
    starts: list[float] = []
    if batch is None:
        ids = await start_all(engine, steps_wf, [steps] * n, starts)
    else:
        ids = await start_batched(engine, steps_wf, [steps] * n, batch, starts)
    started = time.perf_counter()
    await wait_all(engine, ids)
    elapsed = time.perf_counter() - t0
    cpu = CpuMark(database).since(cpu0, n)
    return {
        **cpu,
        "n": n,
        "steps": steps,
        "seconds": round(elapsed, 3),
        "start_loop_seconds": round(started - t0, 3),
        # Each start returns once its run is durable, while the earlier runs execute.
        "start_p50_ms": round(common.median(starts), 3),
        "start_p90_ms": round(common.pct(starts, 0.9), 3),
        "workflows_per_s": round(n / elapsed, 1),
        "steps_per_s": round(n * steps / elapsed, 1),
    }


async def idle_starts(engine: Engine, workflow: Any, inputs: Sequence[Any]) -> Figures:
    """The same starts with nothing else running: each run is waited for before the next."""
    took: list[float] = []
    for i in inputs:
        await wait_all(engine, await start_all(engine, workflow, [i], took))
    return {"idle_start_p50_ms": round(common.median(took), 3)}


def cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


# ---------------------------------------------------------------- 2. latency


async def latency(target: Target, runs: int = 50, steps: int = 10) -> Figures:
    target.renew()
    database = common.PG_DB if target.db == "pg" else None
    async with target.engine(steps_wf) as engine:
        for _ in range(5):
            await one_run_ms(engine, steps)
        cpu0 = CpuMark(database)
        samples = [await one_run_ms(engine, steps) for _ in range(runs)]
        cpu = CpuMark(database).since(cpu0, runs)
    return {
        **cpu,
        "steps": steps,
        "runs": runs,
        "median_ms": round(common.median(samples), 2),
        "p99_ms": round(common.pct(samples, 0.99), 2),
        "min_ms": round(min(samples), 2),
        "max_ms": round(max(samples), 2),
    }


async def one_run_ms(engine: Engine, steps: int) -> float:
    t0 = time.perf_counter()
    run = await engine.start(steps_wf, steps)
    done = await engine.wait_for_run(run.id, timeout=60)
    assert done.output == steps
    return (time.perf_counter() - t0) * 1000


# ---------------------------------------------------------------- 3. per-key serialisation


async def queue(
    target: Target,
    keys: int = 50,
    per_key: int = 20,
    step_ms: float = 2.0,
    batch: int | None = None,
) -> Figures:
    """Per-key serialisation: ``keys`` x ``per_key`` runs of a singleton of limit 1, started one
    at a time, or ``batch`` at a time (``queue_batched``)."""
    target.renew()
    probe = KeyProbe()
    keyed = keyed_workflow(probe, step_ms)
    names = [f"key-{k:03d}" for k in range(keys)]
    inputs = [{"key": k, "seq": j} for j in range(per_key) for k in names]
    probe.expected = len(inputs)
    database = common.PG_DB if target.db == "pg" else None
    async with target.engine(keyed) as engine:
        cpu0, t0 = CpuMark(database), time.perf_counter()
        ids, starts = await enqueue(engine, keyed, inputs, probe, batch)
        enqueued = time.perf_counter()
        runs = await wait_settled(engine, probe, ids)
        elapsed = time.perf_counter() - t0
        cpu = CpuMark(database).since(cpu0, len(ids))  # before the engine's backends close
        order = {rid: (r.created_at, rid) for rid, r in runs.items()}
        checks = serialisation_checks(probe, order)  # the batch's runs, before the idle ones
        # The same keyed start, each on a key of its own (admitted at once).
        alone = [{"key": f"idle-{j:03d}", "seq": j} for j in range(50)]
        idle = await idle_starts(engine, keyed, alone) if keys > 1 and batch is None else {}
    return {
        **({"batch": batch} if batch else {}),
        "keys": keys,
        "per_key": per_key,
        "step_sleep_ms": step_ms,
        "enqueue_seconds": round(enqueued - t0, 3),
        "total_seconds": round(elapsed, 3),
        "workflows_per_s": round(len(ids) / elapsed, 1),
        # Each start returns once its run is durable (admitted, or queued behind its key).
        "start_p50_ms": round(common.median(starts), 3),
        "start_p90_ms": round(common.pct(starts, 0.9), 3),
        **idle,
        "max_inflight_any_key": max(probe.peak.values()),
        **checks,
        **cpu,
    }


async def enqueue(
    engine: Engine, keyed: Any, inputs: Sequence[Any], probe: KeyProbe, batch: int | None
) -> tuple[list[str], list[float]]:
    """The per-key workload's starts, one at a time or ``batch`` at a time; each run's queued
    time into ``probe``, and each start's wall time (ms; a batch's per start)."""
    ids: list[str] = []
    starts: list[float] = []
    if batch is not None:
        for first in range(0, len(inputs), batch):
            made = await start_batched(engine, keyed, inputs[first : first + batch], batch, starts)
            now = time.perf_counter()
            probe.queued.update((run_id, now) for run_id in made)
            ids += made
        return ids, starts
    for i in inputs:
        t1 = time.perf_counter()
        ids.append((await engine.start(keyed, i)).id)
        probe.queued[ids[-1]] = time.perf_counter()
        starts.append((probe.queued[ids[-1]] - t1) * 1000)
    return ids, starts


async def queue_batched(
    target: Target, keys: int = 50, per_key: int = 20, step_ms: float = 2.0, batch: int = 25
) -> Figures:
    """``queue`` with its starts made ``batch`` at a time (``Engine.start_many``)."""
    return await queue(target, keys, per_key, step_ms, batch)


async def wait_settled(
    engine: Engine, probe: KeyProbe, ids: Sequence[str], timeout: float = 600
) -> dict[str, runlane.Run]:
    """Until every body has reported in-process (as the peer's side waits), then until every
    run reads back completed: batched reads of all of them, not one read per run."""
    await asyncio.wait_for(probe.all_left.wait(), timeout)
    deadline = time.monotonic() + timeout
    while True:
        runs = await engine.store.get_runs(ids)
        if all(r.is_terminal for r in runs.values()) and len(runs) == len(ids):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{sum(not r.is_terminal for r in runs.values())} runs unsettled")
        await asyncio.sleep(0.005)
    failed = [r for r in runs.values() if r.status != runlane.RunStatus.COMPLETED]
    if failed:
        raise RuntimeError(f"run {failed[0].id} ended {failed[0].status}: {failed[0].error}")
    return runs


async def handoff(target: Target, per_key: int = 50, step_ms: float = 2.0) -> Figures:
    """Hand-off latency on an otherwise idle engine: one key, ``per_key`` queued runs."""
    figures = await queue(target, keys=1, per_key=per_key, step_ms=step_ms)
    return {k: v for k, v in figures.items() if not k.startswith("enqueue")}


def serialisation_checks(probe: KeyProbe, order: dict[str, tuple[Any, str]]) -> Figures:
    """Overlaps and FIFO violations per key, and the hand-off gaps between neighbours.

    A gap is a hand-off only when the next run was already queued (its start had returned)
    before the holder left; otherwise it measures how far apart the two were started.
    """
    by_key: dict[str, list[tuple[float, float, str]]] = {}
    for run_id, (key, t_in) in probe.entered.items():
        by_key.setdefault(key, []).append((t_in, probe.left[run_id], run_id))
    overlaps = fifo = 0
    gaps: list[float] = []
    for intervals in by_key.values():
        intervals.sort()
        for (_a1, b1, r1), (a2, _b2, r2) in itertools.pairwise(intervals):
            overlaps += a2 < b1
            fifo += order[r2] < order[r1]
            if probe.queued.get(r2, 0.0) <= b1:
                gaps.append((a2 - b1) * 1000)
    return {
        "overlapping_pairs": overlaps,
        "fifo_violations_within_key": fifo,
        "handoffs": len(gaps),
        "handoff_p50_ms": round(common.pct(gaps, 0.5), 2) if gaps else None,
        "handoff_p99_ms": round(common.pct(gaps, 0.99), 2) if gaps else None,
        "handoff_max_ms": round(max(gaps), 2) if gaps else None,
    }


# ---------------------------------------------------------------- 4. store cost (PostgreSQL)


async def store_cost(target: Target, steps: Sequence[int] = (1, 2, 10), n: int = 200) -> Figures:
    """Commits and client statements per run on the bench database, for N steps."""
    target.renew()
    overhead, _ = await commits_of(target, None)
    figures: Figures = {"open_close_commits": overhead, "runs": n}
    for k in steps:
        modes = (("sequential", n // 4, sequential), ("concurrent", n, concurrent))
        for mode, runs, fn in modes:
            commits, counts = await commits_of(target, lambda e, k=k, r=runs, f=fn: f(e, k, r))
            label = f"{k}_steps_{mode}"
            figures[f"commits_per_run_{label}"] = round((commits - overhead) / runs, 2)
            # wait_for_run reads a run that settled before the wait began: a read-only
            # transaction of the benchmark's, which PostgreSQL counts as a commit too.
            reads = counts.pop("wait_reads", 0)
            figures[f"wait_reads_per_run_{label}"] = round(reads / runs, 2)
            figures[f"engine_commits_per_run_{label}"] = round(
                (commits - overhead - reads) / runs, 2
            )
            figures[f"statements_per_run_{label}"] = round(counts["statements"] / runs, 2)
            trips = sum(v for name, v in counts.items() if name != "waits")
            figures[f"round_trips_per_run_{label}"] = round(trips / runs, 2)
            figures[f"client_counts_{label}"] = dict(counts)
        figures[f"target_{k}_steps"] = k + 2
    return figures


async def commits_of(
    target: Target, work: Callable[[Engine], Awaitable[None]] | None
) -> tuple[int, Counter[str]]:
    """xact_commit delta of one engine's life (open, work, close), and the work's statements.

    Closing the engine ends its backends, which flushes their statistics.
    """
    before = common.pg_settled_commits()
    async with target.engine(steps_wf) as engine:
        await warm_up(engine)
        with count_statements() as counts:
            read = engine.store.get_run

            async def counted(run_id: str) -> runlane.Run | None:
                counts["wait_reads"] += 1
                return await read(run_id)

            engine.store.get_run = counted  # type: ignore[method-assign]
            if work is not None:
                await work(engine)
    return common.pg_settled_commits() - before, counts


async def sequential(engine: Engine, steps: int, n: int) -> None:
    for _ in range(n):
        await wait_all(engine, await start_all(engine, steps_wf, [steps]))


async def concurrent(engine: Engine, steps: int, n: int) -> None:
    await wait_all(engine, await start_all(engine, steps_wf, [steps] * n))


# ---------------------------------------------------------------- 5. quota rejections


async def quota(target: Target, attempts: int = 2000) -> Figures:
    """Refused starts on a full quota key (``ConcurrencyLimitError``); see ``refusals``."""
    # The run that fills the key counts once it has suspended (active, and never again pending).
    return await refusals(target, quota_wf, ConcurrencyLimitError, attempts, suspends=True)


async def rate_limit(target: Target, attempts: int = 2000) -> Figures:
    """Refused starts over a rate limit whose window is used up (``RateLimitError``)."""
    return await refusals(target, rate_wf, RateLimitError, attempts, suspends=False)


async def refusals(
    target: Target, workflow: Any, error: type[RunlaneError], attempts: int, *, suspends: bool
) -> Figures:
    """Refused starts on a full key; one engine fills the key, a second one is refused.

    Each engine's backends exit when it closes, flushing their table statistics, so the row
    writes counted between the two closes are the refusals' (and the second engine's open).
    """
    target.renew()
    async with target.engine(workflow) as engine:
        await engine.start(workflow, None)
        if suspends:
            await until_suspended(engine, 1)
    writes0 = pg_writes_settled() if target.db == "pg" else None
    proxy = RoundTripProxy() if target.db == "pg" else None
    store = Target(target.db, target.tmp, proxy.url(target.url)).store() if proxy else None
    async with target.engine(workflow, store=store) as engine:
        before = await count_runs(engine)
        trips0 = proxy.trips if proxy else 0
        with count_statements() as counts:
            refused, elapsed = await refuse_many(engine, workflow, error, attempts)
        trips = (proxy.trips - trips0) if proxy else 0
        after = await count_runs(engine)
    figures: Figures = {
        "attempts": attempts,
        "refused": refused,
        "refusals_per_s": round(refused / elapsed, 1),
        "us_per_refusal": round(elapsed / attempts * 1e6, 1),
        "runs_written_by_refusals": after - before,
    }
    if writes0 is not None:
        figures["pg_row_writes_by_refusals"] = pg_writes_settled() - writes0
        figures["round_trips_per_refusal"] = round(trips / attempts, 2)
        figures["client_counts_per_refusal"] = {
            k: round(v / attempts, 2) for k, v in counts.items()
        }
    return figures


async def refuse_many(
    engine: Engine, workflow: Any, error: type[RunlaneError], attempts: int
) -> tuple[int, float]:
    refused = 0
    t0 = time.perf_counter()
    for _ in range(attempts):
        try:
            await engine.start(workflow, None)
        except error:
            refused += 1
    return refused, time.perf_counter() - t0


def pg_writes_settled() -> int:
    """Row writes so far, once the statistics of backends that just exited are visible."""
    time.sleep(1.0)
    return common.pg_row_writes()


async def count_runs(engine: Engine) -> int:
    total = 0
    while True:
        page = await engine.list_runs(limit=1000, offset=total)
        total += len(page)
        if len(page) < 1000:
            return total


# ---------------------------------------------------------------- 5b. singleton waiters


async def waiters(target: Target, n: int = 10_000, seconds: float = 90.0) -> Figures:
    """Row writes while ``n`` runs wait behind one key whose holder waits for a signal.

    The release would wake the next waiter at once; until then each waiter is touched only by
    its fallback retry timer. ``start_seconds``: the ``n`` starts, one after another, while the
    waiters already parked retry; ``parked_seconds``: until none is left pending. Row writes
    (``n_tup_upd`` of the runs table, PostgreSQL) and the engine's CPU are sampled in three
    equal windows once every waiter has been parked.
    """
    target.renew()
    async with target.engine(lane_wf) as engine:
        await engine.start(lane_wf, None, run_id="holder")
        await until_suspended(engine, 1)
        t0 = time.perf_counter()
        for i in range(0, n, 1000):
            await start_all(engine, lane_wf, [None] * min(1000, n - i))
        started = time.perf_counter() - t0
        await until_none_pending(engine)
        parked = time.perf_counter() - t0
        windows = []
        writes, cpu = pg_writes_settled(), cpu_seconds()
        for _ in range(3):
            await asyncio.sleep(seconds / 3)
            now_writes, now_cpu = common.pg_row_writes(), cpu_seconds()
            windows.append(
                {
                    "row_writes_per_s": round((now_writes - writes) / (seconds / 3), 1),
                    "engine_cpu_ms_per_s": round((now_cpu - cpu) / (seconds / 3) * 1000, 1),
                }
            )
            writes, cpu = now_writes, now_cpu
    return {
        "waiters": n,
        "start_seconds": round(started, 1),
        "parked_seconds": round(parked, 1),
        "seconds": seconds,
        "windows": windows,
    }


async def until_none_pending(engine: Engine, timeout: float = 600) -> None:
    """Every run has been claimed once (a waiter is parked by its first claim)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not await engine.list_runs(status="pending", limit=1):
            return
        await asyncio.sleep(0.5)
    raise TimeoutError(f"runs still pending after {timeout}s")


# ---------------------------------------------------------------- 6. memory


async def memory_suspended(target: Target, n: int = 10_000) -> Figures:
    """RSS growth of one engine holding ``n`` runs suspended on a signal wait."""
    target.renew()
    async with target.engine(steps_wf, waiter_wf) as engine:
        await warm_up(engine)
        idle = settled_rss()
        for i in range(0, n, 1000):
            await start_all(engine, waiter_wf, [None] * min(1000, n - i))
        await until_suspended(engine, n)
        held = settled_rss()
    return {
        "suspended_runs": n,
        "idle_rss_mb": round(idle, 1),
        "rss_with_suspended_mb": round(held, 1),
        "delta_mb": round(held - idle, 1),
    }


def settled_rss() -> float:
    gc.collect()
    return common.rss_mb()


async def until_suspended(
    engine: Engine, n: int, timeout: float = 600, status: str = "suspended"
) -> None:
    """Until ``n`` runs wait (``suspended``; ``blocked`` for those a step queue holds back)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        page = await engine.list_runs(status=status, limit=1, offset=n - 1)
        if page:
            return
        await asyncio.sleep(0.2)
    raise TimeoutError(f"{n} runs did not all suspend within {timeout}s")


async def memory_completed(target: Target, n: int = 100_000, batch: int = 10_000) -> Figures:
    """RSS sampled after every ``batch`` completed runs: it should stay flat."""
    target.renew()
    samples: list[float] = []
    async with target.engine(steps_wf) as engine:
        await warm_up(engine)
        for _ in range(0, n, batch):
            for _ in range(batch // 1000):
                await wait_all(engine, await start_all(engine, steps_wf, [1] * 1000))
            samples.append(round(settled_rss(), 1))
    return {
        "completed_runs": n,
        "rss_samples_mb": samples,
        "growth_after_first_batch_mb": round(samples[-1] - samples[0], 1),
    }


# ---------------------------------------------------------------- 7. scale


async def scale(target: Target, n: int = 1000, finished: int = 100_000) -> Figures:
    """Throughput on an empty store vs one holding ``finished`` completed runs."""
    empty = await throughput(target, n)
    target.renew()
    seeded = await seed_then_measure(target, n, finished)
    return {
        "n": n,
        "finished_rows": finished,
        "empty_workflows_per_s": empty["workflows_per_s"],
        "seeded_workflows_per_s": seeded["workflows_per_s"],
        "seeded_vs_empty": round(seeded["workflows_per_s"] / empty["workflows_per_s"], 3),
        "seed_seconds": seeded["seed_seconds"],
    }


async def seed_then_measure(target: Target, n: int, finished: int) -> Figures:
    store = target.store()
    await store.open()  # creates the schema the seed writes into
    t0 = time.perf_counter()
    await seed.finished_runs(target.db, store, target.url, target.path, finished)
    seed_seconds = time.perf_counter() - t0
    sample = await store.get_run("seed-0000001")  # the store must read the seeded rows
    assert sample is not None and sample.status == runlane.RunStatus.COMPLETED, sample
    await store.close()
    async with target.engine(steps_wf) as engine:
        await warm_up(engine)
        figures = await timed_batch(engine, n, 2)
    return {**figures, "seed_seconds": round(seed_seconds, 1)}


# ---------------------------------------------------------------- 7b. retention


async def prune(
    target: Target, n: int = 1000, finished: int = 100_000, batch: int = 500, reps: int = 3
) -> Figures:
    """Throughput on a store holding ``finished`` completed runs past their retention, without
    retention, then while a driving engine prunes them (medians of ``reps`` batches of ``n``
    runs each), and how long the prune of them all took."""
    target.renew()
    await _seed(target, finished)
    async with target.engine(steps_wf) as engine:
        await warm_up(engine)
        alone = [await timed_batch(engine, n, 2) for _ in range(reps)]
    target.renew()
    await _seed(target, finished)
    retention = runlane.Retention(completed=timedelta(days=1), batch=batch)
    engine = Engine(target.store(), workflows=[steps_wf], steps=[noop], retention=retention)
    t0 = time.perf_counter()
    async with engine:
        assert engine.pruner is not None
        await warm_up(engine)
        during = []
        for _ in range(reps):
            during.append(await timed_batch(engine, n, 2))
            if engine.pruner.deleted >= finished:
                break
        overlapped = engine.pruner.deleted < finished
        while engine.pruner.deleted < finished:
            if time.perf_counter() - t0 > 900:
                raise RuntimeError(f"pruned {engine.pruner.deleted} of {finished} in 900 s")
            await asyncio.sleep(0.1)
        prune_seconds = time.perf_counter() - t0
        left = await engine.read(lambda store: store.count_runs(RunQuery()))
    base, pruning = _median_rate(alone), _median_rate(during)
    return {
        "n": n,
        "finished_rows": finished,
        "batch": batch,
        "alone_workflows_per_s": base,
        "while_pruning_workflows_per_s": pruning,
        "while_pruning_vs_alone": round(pruning / base, 3),
        "batches_while_pruning": len(during),
        "every_batch_overlapped_the_prune": overlapped,
        "prune_seconds": round(prune_seconds, 1),
        "pruned_per_s": round(finished / prune_seconds, 1),
        "runs_left": sum(left.values()),
    }


async def _seed(target: Target, finished: int) -> None:
    store = target.store()
    await store.open()  # creates the schema the seed writes into
    await seed.finished_runs(target.db, store, target.url, target.path, finished)
    await store.close()


def _median_rate(batches: Sequence[Figures]) -> float:
    rates = sorted(b["workflows_per_s"] for b in batches)
    return float(rates[len(rates) // 2])


# ---------------------------------------------------------------- 5c. step queues


@dataclass
class SlotProbe:
    """Who was inside a queued step, and when (perf_counter seconds)."""

    inside: int = 0
    peak: int = 0
    spans: list[tuple[float, float]] = field(default_factory=list)

    async def hold(self, ms: float) -> None:
        self.inside += 1
        self.peak = max(self.peak, self.inside)
        t_in = time.perf_counter()
        try:
            await asyncio.sleep(ms / 1000)
        finally:
            self.inside -= 1
            self.spans.append((t_in, time.perf_counter()))


SLOTS = SlotProbe()


@runlane.step(name="bench.slot", queue="bench")
async def slot_step(ms: float) -> None:
    await SLOTS.hold(ms)


@runlane.step(name="bench.unqueued")
async def unqueued_step(ms: float) -> None:
    await SLOTS.hold(ms)


@runlane.workflow(name="bench.queued")
async def queued_wf(ctx: runlane.Context, i: dict[str, Any]) -> None:
    await ctx.step(slot_step if i["queued"] else unqueued_step, i["ms"])


async def step_queue(
    target: Target, n: int = 1000, concurrency: int = 8, step_ms: float = 2.0, chain: int = 50
) -> Figures:
    """A StepQueue's cost and speed: round trips, statements and commits per queued step
    beside the same run without a queue (PostgreSQL); ``n`` runs through
    ``concurrency`` slots; and the hand-off latency of a freed slot (``chain`` runs through
    one slot, the gap from one step's end to the next one's start)."""
    global SLOTS
    figures: Figures = {"runs": n, "concurrency": concurrency, "step_sleep_ms": step_ms}
    if target.db == "pg":
        for label, queued in (("queued", True), ("unqueued", False)):
            cost = await _queue_cost(target, queued, runs=100)
            figures.update({f"{k}_{label}": v for k, v in cost.items()})
    target.renew()
    SLOTS = SlotProbe()
    async with _queue_engine(target, concurrency) as engine:
        t0, cpu0 = time.perf_counter(), cpu_seconds()
        await wait_all(
            engine, await start_all(engine, queued_wf, [{"queued": True, "ms": step_ms}] * n)
        )
        elapsed, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    figures.update(
        {
            "total_seconds": round(elapsed, 3),
            "workflows_per_s": round(n / elapsed, 1),
            "cpu_ms_per_run": round(cpu / n * 1000, 3),
            "peak_inside": SLOTS.peak,
            "ideal_workflows_per_s": round(concurrency / (step_ms / 1000), 1),
        }
    )
    target.renew()
    SLOTS = SlotProbe()
    async with _queue_engine(target, 1) as engine:
        holder = await engine.start(queued_wf, {"queued": True, "ms": 1500.0})
        while SLOTS.inside == 0:  # the first holds the slot while the others line up behind
            await asyncio.sleep(0.001)
        ids = await start_all(engine, queued_wf, [{"queued": True, "ms": 1.0}] * chain)
        await until_suspended(engine, chain, status="blocked")
        await wait_all(engine, [holder.id, *ids])
    spans = sorted(SLOTS.spans)
    gaps = [(b[0] - a[1]) * 1000 for a, b in itertools.pairwise(spans)]
    figures.update(
        {
            "handoffs": len(gaps),
            "handoff_p50_ms": round(common.pct(gaps, 0.5), 2),
            "handoff_p99_ms": round(common.pct(gaps, 0.99), 2),
            "overlapping_handoffs": sum(g < 0 for g in gaps),
        }
    )
    return figures


def _queue_engine(target: Target, concurrency: int, store: Store | None = None) -> Engine:
    return Engine(
        store or target.store(),
        workflows=[queued_wf],
        steps=[slot_step, unqueued_step],
        queues=[StepQueue("bench", concurrency=concurrency)],
    )


async def _queue_cost(target: Target, queued: bool, runs: int) -> Figures:
    """Per run of one step, run one after the other: commits, statements and round trips."""
    target.renew()
    proxy = RoundTripProxy()
    before = common.pg_settled_commits()
    async with _queue_engine(
        target, 8, Target("pg", target.tmp, proxy.url(target.url)).store()
    ) as engine:
        await wait_all(engine, await start_all(engine, queued_wf, [{"queued": queued, "ms": 0.0}]))
        trips0 = proxy.trips
        with count_statements() as counts:
            for _ in range(runs):
                await wait_all(
                    engine, await start_all(engine, queued_wf, [{"queued": queued, "ms": 0.0}])
                )
        trips = proxy.trips - trips0
    commits = common.pg_settled_commits() - before
    return {
        "round_trips_per_run": round(trips / runs, 2),
        "statements_per_run": round(counts["statements"] / runs, 2),
        "commits_per_run": round(commits / runs, 2),
    }


# ---------------------------------------------------------------- 9. schedules


@runlane.workflow(name="bench.tick")
async def tick_wf(ctx: runlane.Context, _: Any) -> None:
    return None


async def schedules(target: Target, n: int = 10_000, every: int = 60) -> Figures:
    """``n`` schedules each due once per ``every`` seconds, fired by hand on a ManualClock.

    The engine does not drive (``drive=False``): a firing pass is ``engine.fire_schedules()``,
    called here, and the windows' runs are created but not executed, so the figures are the
    firing's alone. All ``n`` windows fall on the same minute (``every`` windows are multiples
    of ``every`` since the epoch): the worst case for one pass.
    """
    target.renew()
    clock = ManualClock(datetime.fromtimestamp((time.time() // every) * every + 1, UTC))
    engine = Engine(target.store(), workflows=[tick_wf], clock=clock, drive=False)
    figures: Figures = {"schedules": n, "every_seconds": every}
    async with engine:
        t0 = time.perf_counter()
        for i in range(n):
            await engine.schedules.upsert(Schedule(f"bench-{i:05d}", "bench.tick", every=every))
        figures["upsert_ms_per_schedule"] = round((time.perf_counter() - t0) * 1000 / n, 3)
        figures["poll_interval_seconds"] = engine.options.poll_interval
        with count_statements() as idle:  # nothing due yet: the pass is its due query alone
            t0 = time.perf_counter()
            idle_fired = await engine.fire_schedules()
            figures["idle_pass_ms"] = round((time.perf_counter() - t0) * 1000, 3)
        clock.advance(every)  # every schedule's next window is now one second past
        with count_statements() as due:
            passes, fired, elapsed, cpu = await fire_until_idle(engine)
        clock.advance(every)  # the next minute: the steady state, n runs already in the store
        with count_statements() as steady:
            _, steady_fired, steady_elapsed, _ = await fire_until_idle(engine)
        created = await count_runs(engine)
    figures.update(
        {
            "idle_pass_windows": idle_fired,
            "windows_fired": fired,
            "runs_created": created,
            "passes": passes,
            "fire_seconds": round(elapsed, 3),
            "windows_per_s": round(fired / elapsed, 1) if elapsed else None,
            "fire_cpu_ms_per_window": round(cpu * 1000 / max(1, fired), 3),
            "fired_within_poll_interval": elapsed <= engine.options.poll_interval,
            "next_minute_windows_fired": steady_fired,
            "next_minute_fire_seconds": round(steady_elapsed, 3),
            "next_minute_within_poll_interval": steady_elapsed <= engine.options.poll_interval,
        }
    )
    if target.db == "pg":
        figures["idle_pass_statements"] = idle["statements"]
        figures["idle_pass_socket_waits"] = idle["waits"]
        figures["due_statements"] = due["statements"]
        figures["due_statements_per_window"] = round(due["statements"] / max(1, fired), 4)
        figures["due_socket_waits_per_window"] = round(due["waits"] / max(1, fired), 4)
        figures["next_minute_statements"] = steady["statements"]
        figures["due_query_plan"] = due_query_plan(target.url, clock.now())
    return figures


async def fire_until_idle(engine: Engine) -> tuple[int, int, float, float]:
    """Firing passes until one fires nothing: passes, windows fired, seconds, CPU seconds."""
    passes = fired = 0
    t0, cpu0 = time.perf_counter(), cpu_seconds()
    while True:
        passes += 1
        got = await engine.fire_schedules()
        fired += got
        if got == 0:
            return passes, fired, time.perf_counter() - t0, cpu_seconds() - cpu0


def due_query_plan(url: str, now: datetime) -> str:
    """The scan nodes of the due query's plan, with the server's default settings."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "EXPLAIN (FORMAT JSON) SELECT * FROM runlane_schedules"
            " WHERE NOT paused AND next_fire_at <= %s ORDER BY next_fire_at, id LIMIT 500",
            (now + timedelta(days=1),),
        ).fetchone()
    assert row is not None
    found: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        if "Scan" in node["Node Type"]:
            found.append(f"{node['Node Type']} {node.get('Index Name', '')}".strip())
        for child in node.get("Plans", []):
            walk(child)

    walk(row[0][0]["Plan"])
    return ", ".join(found)


# ---------------------------------------------------------------- 0. the floor


async def floor(target: Target, n: int = 1000) -> Figures:
    """What one durable commit costs on this store with nothing of runlane in it: ``n``
    single-row inserts of a small run-like row, one after another, each committed before the
    next is sent, as a start is (and a step's checkpoint before the next step runs). The same
    driver and durability as the store: psycopg (statements prepared after their fifth use, as
    psycopg does) on PostgreSQL with the server's default ``synchronous_commit``; ``sqlite3``
    in WAL mode with ``synchronous = NORMAL`` on SQLite, on the calling thread."""
    target.renew()
    samples: list[float] = []
    if target.db == "pg":
        import psycopg

        async with await psycopg.AsyncConnection.connect(target.url, autocommit=True) as conn:
            await conn.execute(_FLOOR_TABLE.format(json="jsonb", time="timestamptz"))
            cpu0 = CpuMark(common.PG_DB)
            for i in range(n):
                t0 = time.perf_counter()
                await conn.execute(_FLOOR_INSERT.format(p="%s"), _floor_row(i))
                samples.append(time.perf_counter() - t0)
            cpu = CpuMark(common.PG_DB).since(cpu0, n)
    else:
        import sqlite3

        assert target.path is not None
        lite = sqlite3.connect(target.path, isolation_level=None)
        try:
            lite.execute("PRAGMA synchronous = NORMAL")
            lite.execute(_FLOOR_TABLE.format(json="text", time="text"))
            cpu0 = CpuMark()
            for i in range(n):
                t0 = time.perf_counter()
                lite.execute("BEGIN IMMEDIATE")
                lite.execute(_FLOOR_INSERT.format(p="?"), _floor_row(i))
                lite.execute("COMMIT")
                samples.append(time.perf_counter() - t0)
            cpu = CpuMark().since(cpu0, n)
        finally:
            lite.close()
    return {
        "n": n,
        "commit_p50_ms": round(common.median(samples) * 1000, 3),
        "commit_mean_ms": round(sum(samples) / n * 1000, 3),
        "commit_p99_ms": round(common.pct(samples, 0.99) * 1000, 3),
        **{k.replace("_per_wf", "_per_commit"): v for k, v in cpu.items()},
    }


_FLOOR_TABLE = (
    "CREATE TABLE floor_runs (id text PRIMARY KEY, workflow text NOT NULL,"
    " status text NOT NULL, input {json}, created_at {time} NOT NULL)"
)
_FLOOR_INSERT = "INSERT INTO floor_runs VALUES ({p}, {p}, {p}, {p}, {p})"


def _floor_row(i: int) -> tuple[Any, ...]:
    return (f"run-{i:06d}", "bench.floor", "pending", '{"key":"key-000","seq":1}', _now_text())


def _now_text() -> str:
    return datetime.now(UTC).isoformat()


# ---------------------------------------------------------------- 10. fan-out


@runlane.workflow(name="bench.leaf")
async def leaf_wf(ctx: runlane.Context, i: int) -> int:
    return i


@runlane.workflow(name="bench.fan")
async def fan_wf(ctx: runlane.Context, n: int) -> int:
    outputs = await ctx.all([ctx.child(leaf_wf, i) for i in range(n)])
    return len(outputs)


async def fan_out(target: Target, n: int = 10_000) -> Figures:
    """One parent starting ``n`` children with ``ctx.all([ctx.child(...)])``: time from the
    parent's start until it completed (every child settled), and the store's cost per child."""
    target.renew()
    async with target.engine(fan_wf, leaf_wf) as engine:
        warm = await engine.start(fan_wf, 20)
        await wait_all(engine, [warm.id])
        before = common.pg_settled_commits() if target.db == "pg" else 0
        with count_statements() as counts:
            t0, cpu0 = time.perf_counter(), cpu_seconds()
            parent = await engine.start(fan_wf, n)
            await wait_all(engine, [parent.id], timeout=1800)
            elapsed, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
        done = await engine.get_run(parent.id)
        if done is None or done.output != n:
            raise RuntimeError(f"the parent saw {done and done.output} children, not {n}")
    figures: Figures = {
        "children": n,
        "seconds": round(elapsed, 3),
        "children_per_s": round(n / elapsed, 1),
        "py_cpu_ms_per_child": round(cpu * 1000 / n, 3),
    }
    if target.db == "pg":
        commits = common.pg_settled_commits() - before  # the engine closed: its stats are in
        figures.update(
            {
                "statements_per_child": round(counts["statements"] / n, 2),
                "socket_waits_per_child": round(counts["waits"] / n, 2),
                "commits_per_child": round(commits / n, 2),
            }
        )
    return figures


# ---------------------------------------------------------------- command line

WORKLOADS: dict[str, Callable[..., Awaitable[Figures]]] = {
    "floor": floor,
    "throughput": throughput,
    "throughput_batched": throughput_batched,
    "queue_batched": queue_batched,
    "start_cost": start_cost.start_cost,
    "latency": latency,
    "queue": queue,
    "handoff": handoff,
    "store_cost": store_cost,
    "quota": quota,
    "rate_limit": rate_limit,
    "memory_suspended": memory_suspended,
    "memory_completed": memory_completed,
    "scale": scale,
    "waiters": waiters,
    "step_queue": step_queue,
    "schedules": schedules,
    "fan_out": fan_out,
    "remote_latency": remote.remote_latency,
    "remote_throughput": remote.remote_throughput,
    "prune": prune,
}


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", choices=["pg", "sqlite", "memory"], default="sqlite")
    p.add_argument("--workloads", default="throughput,latency,queue")
    p.add_argument("--params", default="{}", help='JSON: {"workload": {"kwarg": value}}')
    p.add_argument("--json", default="", help="append one JSON line per workload to this file")
    return p.parse_args(argv)


async def run_workloads(args: argparse.Namespace) -> None:
    params = json.loads(args.params)
    with tempfile.TemporaryDirectory(prefix="runlane-bench-") as tmp:
        target = Target(args.db, Path(tmp))
        for name in args.workloads.split(","):
            load = common.load_avg()
            figures = await WORKLOADS[name](target, **params.get(name, {}))
            line = {"workload": name, "db": args.db, "load_before": load, **figures}
            line["load_after"] = common.load_avg()
            if target.path is not None:
                line["sqlite_journal_mode"] = common.sqlite_mode(target.path)
            emit(line, args.json)


def emit(line: Figures, path: str) -> None:
    text = json.dumps(line)
    print(f"[{line['workload']}] {text}", flush=True)
    if path:
        with open(path, "a") as f:
            f.write(text + "\n")


def main(argv: Sequence[str]) -> None:
    args = parse_args(argv)
    try:
        asyncio.run(run_workloads(args))
    finally:
        if args.db == "pg":
            common.drop_pg()


if __name__ == "__main__":
    main(sys.argv[1:])
