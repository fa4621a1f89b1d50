"""What only the PostgreSQL store promises: migrations, indexes, exact quotas across processes,
a bounded number of commits per run, and a pool that survives losing its connections."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from runlane.admission import lane
from runlane.attributes import AttributeValue
from runlane.errors import RunCancelling, RunlaneError, StoreUnavailableError
from runlane.models import (
    DebounceGate,
    Lease,
    QuotaGate,
    RateGate,
    RetryTimer,
    RunSpec,
    RunStatus,
    Serves,
    Settlement,
    SingletonGate,
    StepRecord,
    WindowFire,
    Writes,
)
from runlane.stores import open_store
from runlane.stores.migrations import migrations
from runlane.stores.postgres import PostgresStore, upgrade
from runlane.stores.postgres.db import SQL
from runlane.stores.postgres.rows import (
    attribute_params,
    fenced_params,
    filtered,
    fires_param,
    gate_params,
    limit_params,
    pg_array,
    served_params,
    specs_params,
    utc_conninfo,
)
from runlane.stores.postgres.starts import batch_calls
from runlane.stores.postgres.writes import KeyedSettlements

from ..races import race_starts

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LATER = timedelta(seconds=1)
LATEST = migrations("postgres")[-1][0]

NO_WAIT = RetryTimer(0.0, 0.0)  # a denied waiter is due again at once


@pytest.fixture
def scratch_url(pg_url: str) -> Iterator[str]:
    """An empty database of its own, on the session's server, dropped afterwards."""
    name = f"runlane_scratch_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{pg_url.rsplit('/', 1)[0]}/{name}"
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
async def pg_store(pg_url: str) -> AsyncIterator[PostgresStore]:
    store = PostgresStore(pg_url)
    await store.open()
    await store.reset_for_tests()
    try:
        yield store
    finally:
        await store.close()


def catalog(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Tables, columns, indexes and constraints of the runlane schema, comparable as values."""
    queries = {
        "columns": """SELECT table_name, column_name, data_type, is_nullable, column_default,
                             collation_name
                      FROM information_schema.columns WHERE table_name LIKE 'runlane_%'""",
        "indexes": "SELECT indexname, indexdef FROM pg_indexes WHERE tablename LIKE 'runlane_%'",
        "constraints": """SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint
                          WHERE conrelid::regclass::text LIKE 'runlane_%'""",
    }
    with psycopg.connect(url) as conn:
        return {what: sorted(conn.execute(sql).fetchall()) for what, sql in queries.items()}


def versions(url: str) -> list[int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT version FROM runlane_schema_version ORDER BY version")
        return [version for (version,) in rows.fetchall()]


# ---------------------------------------------------------------- migrations


async def test_applying_the_migrations_by_hand_reproduces_the_schema_a_store_creates(
    scratch_url: str, pg_url: str
) -> None:
    with psycopg.connect(scratch_url, autocommit=True) as conn:
        for _, script in migrations("postgres"):
            conn.execute(script.encode())
    opened_store = PostgresStore(pg_url)
    await opened_store.open()
    await opened_store.close()
    by_hand, opened = catalog(scratch_url), catalog(pg_url)
    assert by_hand == opened
    assert {"runlane_runs", "runlane_steps", "runlane_signals", "runlane_events"} <= {
        table for table, *_ in by_hand["columns"]
    }


async def test_upgrade_records_every_version_once_and_is_idempotent(scratch_url: str) -> None:
    assert await upgrade(scratch_url) == LATEST
    assert await upgrade(scratch_url) == LATEST
    assert versions(scratch_url) == list(range(1, LATEST + 1))


async def test_ten_concurrent_upgrades_migrate_exactly_once(scratch_url: str) -> None:
    results = await asyncio.gather(*(upgrade(scratch_url) for _ in range(10)))
    assert results == [LATEST] * 10
    assert versions(scratch_url) == list(range(1, LATEST + 1))


async def test_ten_stores_opening_at_once_on_an_empty_database_all_open(scratch_url: str) -> None:
    stores = [PostgresStore(scratch_url, max_size=1) for _ in range(10)]
    await asyncio.gather(*(store.open() for store in stores))
    try:
        assert versions(scratch_url) == list(range(1, LATEST + 1))
        assert await stores[3].get_run("nothing") is None
    finally:
        await asyncio.gather(*(store.close() for store in stores))


async def test_a_database_with_a_newer_schema_version_is_refused(scratch_url: str) -> None:
    await upgrade(scratch_url)
    with psycopg.connect(scratch_url) as conn:
        conn.execute("INSERT INTO runlane_schema_version (version) VALUES (9999)")
    store = PostgresStore(scratch_url)
    with pytest.raises(RunlaneError, match=r"schema version 9999.*upgrade runlane"):
        await store.open()
    with pytest.raises(RunlaneError, match="not open"):
        await store.get_run("never-created")
    with pytest.raises(RunlaneError, match="schema version 9999"):
        await upgrade(scratch_url)


# ---------------------------------------------------------------- lifecycle


async def test_opens_are_counted_and_the_last_close_really_closes(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    await store.open()
    await store.open()
    await store.close()
    assert await store.get_run("never-created") is None  # still open after one close
    await store.close()
    await store.close()
    with pytest.raises(RunlaneError, match="not open"):
        await store.get_run("never-created")


def test_open_store_builds_a_postgres_store_from_its_url(pg_url: str) -> None:
    store = open_store(pg_url)
    assert isinstance(store, PostgresStore) and store.url == pg_url


async def test_timestamps_read_back_in_utc(pg_store: PostgresStore) -> None:
    local = datetime(2026, 1, 1, 9, 30, tzinfo=timezone(timedelta(hours=5)))
    [started] = await pg_store.create_runs([RunSpec("a", "wf", "1", None, local)], local)
    assert started.run is not None
    assert started.run.created_at == local and started.run.created_at.utcoffset() == timedelta(0)


async def test_json_values_keep_their_key_order_and_nul_characters(pg_store: PostgresStore) -> None:
    value = {"z": 1, "a": [1.5, "x\u0000y", None, True], "m": {"b": 2, "a": 1}}
    await pg_store.create_runs([RunSpec("a", "wf", "1", value, T0)], T0)
    run = await pg_store.get_run("a")
    assert run is not None and run.input == value
    assert list(run.input) == ["z", "a", "m"] and list(run.input["m"]) == ["b", "a"]


def _terminate_other_backends(pg_url: str) -> int:
    with psycopg.connect(pg_url, autocommit=True) as admin:
        rows = admin.execute(
            """SELECT pg_terminate_backend(pid) FROM pg_stat_activity
               WHERE datname = current_database() AND pid <> pg_backend_pid()"""
        ).fetchall()
    return len(rows)


async def test_connections_terminated_while_idle_are_replaced_without_failing_a_call(
    pg_url: str,
) -> None:
    store = PostgresStore(pg_url, min_size=3, max_size=3)
    await store.open()
    try:
        await asyncio.gather(*(store.get_run("warm") for _ in range(6)))
        assert _terminate_other_backends(pg_url) >= 1
        await asyncio.sleep(0.1)  # the server's goodbye reaches the idle sockets
        # Every pooled connection is dead: each is found so at checkout, and replaced.
        assert (
            await asyncio.gather(*(store.get_run("never-created") for _ in range(6))) == [None] * 6
        )
    finally:
        await store.close()


async def test_a_connection_terminated_during_a_call_raises_store_unavailable_once(
    pg_url: str,
) -> None:
    store = PostgresStore(pg_url, min_size=1, max_size=2)
    await store.open()
    try:

        async def slow(conn: Any) -> None:
            await conn.execute("SELECT pg_sleep(5)")

        call = asyncio.create_task(store._db.run(slow))
        await asyncio.sleep(0.5)
        assert await asyncio.to_thread(_terminate_other_backends, pg_url) >= 1
        with pytest.raises(StoreUnavailableError) as raised:
            await call
        assert isinstance(raised.value.cause, psycopg.OperationalError)
        assert raised.value.__cause__ is raised.value.cause
        assert "terminat" in str(raised.value) or "closed" in str(raised.value)
        assert await store.get_run("never-created") is None
    finally:
        await store.close()


async def test_an_unreachable_server_raises_store_unavailable_at_open() -> None:
    store = PostgresStore("postgresql://postgres@127.0.0.1:1/none?connect_timeout=2")
    with pytest.raises(StoreUnavailableError) as raised:
        await store.open()
    assert isinstance(raised.value.cause, psycopg.OperationalError)


# ---------------------------------------------------------------- indexes


_PREPARED = itertools.count()


async def _explain(conn: psycopg.AsyncConnection[Any], name: str, params: dict[str, Any]) -> str:
    """The generic plan of a hot statement: the store's sessions force generic plans (each
    statement is planned once per connection), so that is the plan that must use indexes."""
    query = SQL[name]
    query = filtered(query, params)
    names: list[str] = []

    def placeholder(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    statement = re.sub(r"%\((\w+)\)s", placeholder, query).rstrip().rstrip(";")
    prepared = f"hot_{next(_PREPARED)}"
    await conn.execute("SET plan_cache_mode = force_generic_plan")
    if name in _IN_FUNCTIONS:
        return await _nested_plans(conn, query, params)
    await conn.execute(f"PREPARE {prepared} AS {statement}")
    async with psycopg.AsyncClientCursor(conn) as cur:
        args = f"({', '.join(['%s'] * len(names))})" if names else ""
        await cur.execute(f"EXPLAIN EXECUTE {prepared}{args}", [params[n] for n in names])
        return "\n".join(row[0] for row in await cur.fetchall())


def test_every_statement_is_short_enough_for_psycopg_to_cache_its_parsing() -> None:
    # A longer one is parsed again at every execution: about 0.2 ms of client CPU each time.
    # Only the listings built in Python (their ``{filters}``) go through psycopg's cursor; the
    # named statements are numbered once and sent past it (``postgres/direct.py``).
    from psycopg import _queries

    limit = _queries.MAX_CACHED_STATEMENT_LENGTH
    cursor = {name: text for name, text in SQL.items() if "{filters}" in text}
    assert cursor, "the listings built in Python are found"
    too_long = {name: len(text) for name, text in cursor.items() if len(text) > limit}
    assert not too_long, f"statements over psycopg's {limit}-character parse cache: {too_long}"
    most = _queries.MAX_CACHED_STATEMENT_PARAMS
    params = {name: len(set(re.findall(r"%\((\w+)\)s", text))) for name, text in SQL.items()}
    assert max(params.values()) <= most, params


# Statements whose work is done by a function (see the migrations): its statements' plans are
# what matters, and only auto_explain shows them, by running the statement.
_IN_FUNCTIONS = {"gate_counts", "limit_counts"}


async def _nested_plans(
    conn: psycopg.AsyncConnection[Any], query: str, params: dict[str, Any]
) -> str:
    plans: list[str] = []
    conn.add_notice_handler(lambda diag: plans.append(diag.message_primary or ""))
    await conn.execute("LOAD 'auto_explain'")
    for setting in ("log_min_duration = 0", "log_nested_statements = on", "log_level = notice"):
        await conn.execute(f"SET auto_explain.{setting}")
    await conn.execute(query, params)
    await conn.execute("RESET auto_explain.log_min_duration")
    return "\n".join(plans)


_BULK = """
INSERT INTO runlane_runs (id, workflow, version, status, input, created_at, updated_at, settled_at,
    wake_at, lease_owner, lease_expires_at, deadline_at, parent_id, priority, singleton_key,
    holds_slot, concurrency_key, namespace, tags, attributes)
SELECT 'run-' || i, 'wf-' || (i % 20), '1',
       CASE WHEN i % 100 < 5 THEN 'pending' WHEN i % 100 < 10 THEN 'suspended'
            WHEN i % 100 < 12 THEN 'running' WHEN i % 100 = 12 THEN 'blocked'
            WHEN i % 100 = 13 THEN 'failed' ELSE 'completed' END,
       '{}', t, t, CASE WHEN i % 100 >= 13 THEN t END,
       CASE WHEN i % 100 BETWEEN 5 AND 9 OR i % 100 = 12 THEN t + interval '1 hour' END,
       CASE WHEN i % 100 IN (10, 11) THEN 'owner' END,
       CASE WHEN i % 100 IN (10, 11) THEN t + interval '30 seconds' END,
       CASE WHEN i % 20 = 0 THEN t + interval '1 day' END,
       CASE WHEN i % 3 = 0 THEN 'run-' || (i / 3) END,
       i % 3,
       CASE WHEN i % 10 = 0 THEN 'key-' || (i % 500) END,
       i % 100 IN (10, 11) AND i % 10 = 0,
       CASE WHEN i % 7 = 0 THEN 'tenant-' || (i % 50) END,
       'ns-' || (i % 4),
       CASE WHEN i % 1000 = 0 THEN ARRAY['vip'] ELSE ARRAY['web'] END,
       CASE WHEN i % 2 = 0
            THEN jsonb_build_object('customer', 'customer-' || (i % 100), 'tier', i % 3) END
FROM generate_series(1, 100000) AS i,
     LATERAL (SELECT timestamptz '2026-01-01 00:00:00+00' + i * interval '1 second' AS t) AS c
"""

# The entries the runs' attributes should have in runlane_attribute_runs (migration 0023).
_ENTRIES = """
SELECT jsonb_hash_extended(jsonb_build_object(a.key, a.value), 0), r.created_at, r.id
FROM runlane_runs AS r, jsonb_each(r.attributes) AS a
"""

# The entries of the bulk runs' attributes, as migration 0023 writes those of the runs it finds.
_BULK_ENTRIES = f"INSERT INTO runlane_attribute_runs (entry, created_at, run_id) {_ENTRIES}"

_GATED = RunSpec(
    "new-run",
    "wf-3",
    "1",
    None,
    T0,
    singleton=SingletonGate("key-10", max_queue_depth=5),
    quota=QuotaGate("tenant-7", 8),
)
# A batch's gated starts on keys all apart (one statement for them all).
_APART = [
    _GATED,
    replace(_GATED, id="new-run-2", singleton=SingletonGate("key-11"), quota=QuotaGate("t-8", 8)),
]
_LIMITED = replace(
    _GATED,
    rate=RateGate("4:wf-3:tenant-7", 10, 60.0, delay=True),
    debounce=DebounceGate("4:wf-3:doc-1", 5.0, 60.0),
)

_FIRE = WindowFire(
    "s", T0, T0 + timedelta(60), T0 + timedelta(60), RunSpec("sched:s:1", "wf", "1", None, T0)
)

# The codes an engine serves: three of the twenty workflows (one in a version nobody runs).
_SERVED = dict(served_params(Serves(frozenset({("wf-1", "1"), ("wf-3", "1"), ("wf-3", "2")}))))

# Half way down 100,000 runs: a page deep in the listing.
_CURSOR = {"after_at": T0 + timedelta(seconds=50000), "after_id": "run-50000"}

_HOT = {
    "runs by id": ("get_runs", {"ids": "{run-10,run-11}"}),
    "a gated start": ("insert_gated", {**specs_params([_GATED]), **gate_params(_GATED, T0)}),
    "a batch's gated starts on keys all apart": batch_calls(_APART, T0, [None, None])[-1],
    "a start under a rate limit and a debounce": (
        "insert_limited",
        {**specs_params([_LIMITED]), **limit_params(_LIMITED, T0)},
    ),
    "the counts of a start under a rate limit and a debounce": (
        "limit_counts",
        limit_params(_LIMITED, T0),
    ),
    "pending pickup": ("pending_run_ids", {"now": T0, "limit": 100, "namespace": None}),
    "pending pickup of the codes an engine serves": (
        "pending_run_ids_served",
        {"now": T0, "limit": 100, "namespace": None, **_SERVED},
    ),
    "due timers of the codes an engine serves": (
        "due_run_ids_served",
        {"now": T0 + timedelta(hours=2), "limit": 500, "namespace": None, **_SERVED},
    ),
    "expired leases of the codes an engine serves": (
        "expired_run_ids_served",
        {"now": T0 + timedelta(hours=1), "limit": 100, "namespace": "ns-1", **_SERVED},
    ),
    "execution timeouts of the codes an engine serves": (
        "timed_out_run_ids_served",
        {"now": T0 + timedelta(days=1, hours=1), "limit": 100, "namespace": None, **_SERVED},
    ),
    "due timers handed off to the run queue": (
        "hand_off_due_served",
        {
            "now": T0 + timedelta(hours=2),
            "limit": 500,
            "namespace": None,
            "hold_until": T0 + timedelta(hours=3),
            **_SERVED,
        },
    ),
    "pending pickup of a namespace": (
        "pending_run_ids",
        {"now": T0, "limit": 100, "namespace": "ns-1"},
    ),
    "due timers": (
        "due_run_ids",
        {"now": T0 + timedelta(hours=2), "limit": 500, "namespace": None},
    ),
    "expired leases": (
        "expired_run_ids",
        {"now": T0 + timedelta(hours=1), "limit": 100, "namespace": None},
    ),
    "execution timeouts": (
        "timed_out_run_ids",
        {"now": T0 + timedelta(days=1, hours=1), "limit": 100, "namespace": None},
    ),
    "key admission counts at start": (
        "gate_counts",
        {
            "lock_keys": "{s:key-10,q:tenant-7}",
            "quota_key": "tenant-7",
            "quota_statuses": "{pending,running,suspended,blocked,cancelling}",
            "singleton_key": "key-10",
            "singleton_limit": 1,
            "queue_capacity": 5,
            "run_created_at": T0 + timedelta(hours=5),
            "run_id": "run-10",
            "now": T0,
        },
    ),
    "singleton admission at claim": (
        "admission_counts",
        {
            "key": "key-10",
            "created_at": T0 + timedelta(hours=5),
            "id": "run-10",
            "most": 1,
            "now": T0,
        },
    ),
    "a waiter's claim (admitted or blocked)": (
        "claim_admit",
        {
            "id": "run-10",
            "owner": "o",
            "now": T0,
            "lease_until": T0 + timedelta(seconds=30),
            "handoff": False,
            "retry_first": 1.0,
            "retry_most": 30.0,
            "retry_jitter": 1.0,
            **_SERVED,
        },
    ),
    "settling, handing the slot to the next waiter": (
        "settle",
        {
            **fenced_params("run-10", None, Writes(), allow_cancelling=True),
            "status": "completed",
            "output": None,
            "error": None,
            "now": T0,
            "successor": "heir",
            "successor_until": T0 + timedelta(seconds=30),
            **_SERVED,
        },
    ),
    "a checkpoint": (
        "checkpoint",
        {
            **fenced_params(
                "run-10", "owner", Writes(steps=[StepRecord("run-10", 1, "s", "step", "completed")])
            ),
            "now": T0,
        },
    ),
    "pruning settled runs": (
        "prune_runs",
        {
            "statuses": ["completed", "failed"],
            "cutoffs": [T0 + timedelta(hours=2), T0 + timedelta(hours=2)],
            "limit": 500,
        },
    ),
    "listing newest first": ("list_runs", {"limit": 100, "offset": 0}),
    "listing a workflow": ("list_runs", {"workflow": "wf-3", "limit": 100, "offset": 0}),
    "a page from a cursor": ("page_runs", {**_CURSOR, "limit": 50}),
    "a page of failed runs": ("page_runs", {"status": "failed", **_CURSOR, "limit": 50}),
    "a page of a workflow": ("page_runs", {"workflow": "wf-3", **_CURSOR, "limit": 50}),
    "a page of a rare tag": ("page_runs", {"tag": "vip", "limit": 50}),
    "a page of a common tag": ("page_runs", {"tag": "web", **_CURSOR, "limit": 50}),
    "counting the runs of a rare tag": ("count_runs", {"tag": "vip"}),
    "a page of a time range": (
        "page_runs",
        {"created_from": T0, "created_until": T0 + timedelta(hours=1), "limit": 50},
    ),
    "a page of an attribute": (
        "page_runs_by_attributes",
        {**attribute_params({"customer": "customer-42"}), "limit": 50},
    ),
    "a page of an attribute from a cursor": (
        "page_runs_by_attributes",
        {**attribute_params({"customer": "customer-42"}), **_CURSOR, "limit": 50},
    ),
    "a page of two attributes from a cursor": (
        "page_runs_by_attributes",
        {**attribute_params({"customer": "customer-42", "tier": 1}), **_CURSOR, "limit": 50},
    ),
    "a page of an attribute in a namespace": (
        "page_runs_by_attributes",
        {**attribute_params({"tier": 2}), "namespace": "ns-1", "limit": 50},
    ),
    "counting the runs of an attribute": (
        "count_runs_by_attributes",
        attribute_params({"customer": "customer-42"}),
    ),
    "listing the runs of an attribute": (
        "list_runs_by_attributes",
        {**attribute_params({"customer": "customer-42"}), "limit": 100, "offset": 0},
    ),
    "setting attributes": (
        "set_attributes",
        {
            **fenced_params("run-10", "owner", Writes()),
            "attributes": '{"tier": 0}',
            "now": T0,
        },
    ),
    "the lanes": ("lane_runs", {}),
    "the lanes overview": ("lane_members", {"shown": 10, "namespace": None, "key": None}),
    "a namespace's lanes overview": ("lane_members", {"shown": 10, "namespace": "eu", "key": None}),
    "one key's lanes": ("lane_members", {"shown": 10, "namespace": None, "key": "key-7"}),
    "one lane": ("lane_runs_of_key", {"lane": "3:wf-1:key-7"}),
    "the overview's last hour": (
        "run_activity",
        {"since": T0 + timedelta(hours=27), "until": T0 + timedelta(hours=28), "namespace": None},
    ),
    "a fenced engine's overview of its namespace": (
        "run_activity",
        {"since": T0 + timedelta(hours=27), "until": T0 + timedelta(hours=28), "namespace": "eu"},
    ),
    "a page of a namespace": ("page_runs", {"namespace": "eu", **_CURSOR, "limit": 50}),
    "children of a parent": ("list_runs", {"parent_id": "run-42", "limit": 100, "offset": 0}),
    "a run tree to cancel": ("run_tree", {"id": "run-7"}),
    "due schedules": ("due_schedules", {"now": T0, "limit": 500, "workflows": None}),
    "due schedules of the workflows an engine serves": (
        "due_schedules",
        {"now": T0, "limit": 500, "workflows": "{wf-1,wf-3}"},
    ),
    "firing a batch of schedules": (
        "fire_windows",
        {
            "fires": fires_param([_FIRE]),
            "schedule_ids": pg_array([_FIRE.schedule_id]),
            "now": T0,
            **specs_params([_FIRE.spec] if _FIRE.spec else []),
        },
    ),
}


def test_a_batch_s_gated_starts_go_in_one_statement_only_when_no_key_is_shared() -> None:
    def statements(specs: list[RunSpec]) -> list[str]:
        return [name for name, _ in batch_calls(specs, T0, [None] * len(specs))]

    plain = RunSpec("plain", "wf-1", "1", None, T0)
    assert statements([*_APART, plain]) == ["lock_keys", "insert_runs", "insert_gated_many"]
    # A shared key: each start counts the ones before it, in the batch's order.
    shared = [*_APART, replace(_GATED, id="new-run-3", quota=None)]
    assert statements(shared) == ["lock_keys", *["insert_gated"] * 3]
    # A rate limit or a debounce: its own statement, on keys apart or not.
    limited = replace(_LIMITED, id="x", singleton=SingletonGate("key-12"), quota=None)
    assert statements([_APART[0], limited]) == [
        "lock_keys",
        "insert_gated",
        "insert_limited",
    ]
    assert statements(_APART[:1]) == ["lock_keys", "insert_gated"]


async def _bulk_plans(url: str, hot: dict[str, tuple[str, dict[str, Any]]]) -> dict[str, str]:
    """The generic plans of ``hot``'s statements on the 100,000 runs of ``_BULK``."""
    await upgrade(url)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("SET runlane.attribute_entries = on")  # they are written below
        await conn.execute(_BULK)
        await conn.execute(_BULK_ENTRIES)
        await conn.execute("ANALYZE runlane_runs, runlane_attribute_runs")
        return {what: await _explain(conn, name, params) for what, (name, params) in hot.items()}


@pytest.mark.slow
async def test_every_hot_query_uses_an_index_on_100000_runs(scratch_url: str) -> None:
    plans = await _bulk_plans(scratch_url, _HOT)
    scans = {what: plan for what, plan in plans.items() if "Seq Scan on runlane_" in plan}
    assert not scans, "\n\n".join(f"{what}:\n{plan}" for what, plan in scans.items())
    assert all("Index" in plan for plan in plans.values()), plans


@pytest.mark.slow
async def test_the_store_s_sessions_start_no_parallel_workers(scratch_url: str) -> None:
    # A generic plan guesses that ``rate_until > $1`` matches a third of the table: on 100,000
    # runs the lanes page's read of the rate windows (which finds none) would start workers,
    # several milliseconds each call. The store's sessions plan none.
    limited = {"read": ("limited_runs", {"now": T0})}
    plain = await _bulk_plans(scratch_url, limited)
    assert "Gather" in plain["read"], plain  # what the setting keeps away
    async with await psycopg.AsyncConnection.connect(
        utc_conninfo(scratch_url), autocommit=True
    ) as conn:
        plan = await _explain(conn, *limited["read"])
    assert "Gather" not in plan and "Parallel" not in plan, plan
    assert "runlane_runs_rate_window" in plan, plan


@pytest.mark.slow
async def test_a_page_of_attributes_walks_the_first_ones_entries_newest_first(
    scratch_url: str,
) -> None:
    # Newest first from the cursor, in the order of the entries' key: the page ends at its
    # 50th run, never sorting every run of the value (as a GIN index made it).
    pages = {what: hot for what, hot in _HOT.items() if hot[0] == "page_runs_by_attributes"}
    assert len(pages) == 4
    for what, plan in (await _bulk_plans(scratch_url, pages)).items():
        assert "Index Only Scan Backward using runlane_attribute_runs_pkey" in plan, (what, plan)
        assert "Sort" not in plan, (what, plan)


async def test_hot_queries_use_indexes_when_planned_on_empty_tables(scratch_url: str) -> None:
    # A store's first statements on a new database are planned while its tables are empty,
    # and those generic plans stay cached on the connection: with seq scans allowed they would
    # scan runlane_runs until autovacuum's first ANALYZE replaced them.
    await upgrade(scratch_url)
    async with await psycopg.AsyncConnection.connect(
        utc_conninfo(scratch_url), autocommit=True
    ) as conn:
        plans = {what: await _explain(conn, name, params) for what, (name, params) in _HOT.items()}
    scans = {what: plan for what, plan in plans.items() if "Seq Scan on runlane_" in plan}
    assert not scans, "\n\n".join(f"{what}:\n{plan}" for what, plan in scans.items())


@pytest.mark.slow
@pytest.mark.parametrize("bulk", [False, True], ids=["empty-tables", "100000-runs"])
async def test_a_merge_and_a_prune_find_the_entries_they_delete_by_their_whole_key(
    scratch_url: str, bulk: bool
) -> None:
    # Given the hashes one attribute at a time, a planner that thinks a run has many (a set
    # function's default estimate) may read a run's entries by their key's other columns:
    # every entry of the table. The hashes go as an array, the entry's key whole.
    hot = {what: _HOT[what] for what in ("setting attributes", "pruning settled runs")}
    if bulk:
        plans = await _bulk_plans(scratch_url, hot)
    else:
        await upgrade(scratch_url)
        async with await psycopg.AsyncConnection.connect(
            utc_conninfo(scratch_url), autocommit=True
        ) as conn:
            plans = {
                what: await _explain(conn, name, params) for what, (name, params) in hot.items()
            }
    for what, plan in plans.items():
        scan = re.search(
            r"Delete on runlane_attribute_runs.*?using runlane_attribute_runs_pkey on .*?\n"
            r"\s+Index Cond: (.*)",
            plan,
            re.DOTALL,
        )
        assert scan is not None and scan[1].startswith("((entry = ANY"), (what, plan)


# ---------------------------------------------------------------- exact admission across processes

QUOTA = QuotaGate("tenant:race", 8)
RATE = RateGate("2:wf:tenant:race", 10, 3600.0, user_key="tenant:race")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("gates", "limit", "refusal"),
    [({"quota": QUOTA}, 8, "ConcurrencyLimitError"), ({"rate": RATE}, 10, "RateLimitError")],
    ids=["quota-of-8", "rate-limit-of-10"],
)
async def test_200_starts_from_4_processes_admit_exactly_the_limit(
    pg_store: PostgresStore, pg_url: str, gates: dict[str, Any], limit: int, refusal: str
) -> None:
    outcomes = race_starts(pg_url, gates)
    admitted = [run_id for run_id, created, _ in outcomes if created]
    assert len(admitted) == limit, admitted
    assert len(outcomes) == 200
    assert {refused for _, created, refused in outcomes if not created} == {refusal}
    assert sorted(run.id for run in await pg_store.list_runs(limit=1000)) == sorted(admitted)


# ---------------------------------------------------------------- cost per run


async def _committed(admin: psycopg.AsyncConnection[Any], database: str) -> int:
    """The database's committed transactions, once the statistics stop moving.

    A backend publishes its counters when it exits (and lazily while idle), so callers close
    their stores first and this waits for the exits to land.
    """
    query = "SELECT xact_commit FROM pg_stat_database WHERE datname = %s"
    last, steady_since = -1, time.monotonic()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        await admin.execute("SELECT pg_stat_clear_snapshot()")
        row = await (await admin.execute(query, [database])).fetchone()
        value = int(row[0]) if row is not None else 0
        if value != last:
            last, steady_since = value, time.monotonic()
        elif time.monotonic() - steady_since > 0.5:
            return value
        await asyncio.sleep(0.1)
    raise AssertionError(f"xact_commit of {database} kept moving; last seen {last}")


async def _commits_of(url: str, admin: psycopg.AsyncConnection[Any], runs: int, n: int) -> int:
    """Commits of a store's whole life (open, ``runs`` runs of ``n`` checkpoints, close)."""
    database = url.rsplit("/", 1)[1]
    before = await _committed(admin, database)
    store = PostgresStore(url, min_size=1, max_size=1)
    await store.open()
    try:
        for i in range(runs):
            await _one_run(store, f"run-{runs}-{i}", n)
    finally:
        await store.close()
    return await _committed(admin, database) - before


async def _one_run(store: PostgresStore, run_id: str, checkpoints: int) -> None:
    await store.create_runs([RunSpec(run_id, "wf", "1", {"n": checkpoints}, T0)], T0)
    outcome = await store.claim_run(
        run_id, "owner", T0, T0 + timedelta(minutes=5), singleton_retry=NO_WAIT
    )
    assert outcome.claim is not None
    for seq in range(1, checkpoints + 1):
        record = StepRecord(run_id, seq, f"step{seq}", "step", "completed", output={"seq": seq})
        await store.checkpoint(run_id, "owner", Writes(steps=(record,)), T0)
    settled = await store.settle_run(
        run_id, "owner", Writes(), Settlement(RunStatus.COMPLETED, {"ok": True}), T0
    )
    assert settled.woken == []


@pytest.mark.slow
async def test_a_checkpoints_touch_of_its_run_is_a_heap_only_update(scratch_url: str) -> None:
    # No index reads updated_at (retention walks settled_at), so the touch writes no index
    # entry: the xact counters see one HOT update of runlane_runs. A run with attributes has
    # entries in runlane_attribute_runs, which the touch leaves alone all the same.
    store = PostgresStore(scratch_url)
    await store.open()
    try:
        spec = RunSpec("run-1", "wf", "1", None, T0, attributes={"customer": "acme"})
        [started] = await store.create_runs([spec], T0, lease=Lease("owner", T0 + LATER * 30))
        assert started.claim is not None
    finally:
        await store.close()
    params = {**fenced_params("run-1", "owner", _record("run-1")), "now": T0 + LATER}
    async with await psycopg.AsyncConnection.connect(scratch_url) as conn:
        cur = await conn.execute(SQL["checkpoint"], params)
        assert await cur.fetchone() == ("running", True, False)  # status, written, pausing
        cur = await conn.execute(
            "SELECT pg_stat_get_xact_tuples_updated(c.oid), pg_stat_get_xact_tuples_hot_updated(c.oid)"
            " FROM pg_class AS c WHERE c.relname = 'runlane_runs'"
        )
        assert await cur.fetchone() == (1, 1)
        cur = await conn.execute(
            "SELECT count(*) FROM pg_index AS i JOIN pg_attribute AS a"
            " ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)"
            " WHERE i.indrelid = 'runlane_runs'::regclass AND a.attname = 'updated_at'"
        )
        assert await cur.fetchone() == (0,)


@pytest.mark.slow
async def test_setting_attributes_is_a_heap_only_update_of_its_run(scratch_url: str) -> None:
    # No index of runlane_runs reads the attributes (their entries are a table of their own):
    # the merge rewrites the run's row heap-only, as a checkpoint's touch does.
    store = PostgresStore(scratch_url)
    await store.open()
    try:
        spec = RunSpec("run-1", "wf", "1", None, T0, attributes={"customer": "acme"})
        await store.create_runs([spec], T0, lease=Lease("owner", T0 + LATER * 30))
    finally:
        await store.close()
    params = {**fenced_params("run-1", "owner", Writes()), "attributes": '{"stage": "paid"}'}
    async with await psycopg.AsyncConnection.connect(scratch_url) as conn:
        cur = await conn.execute(SQL["set_attributes"], {**params, "now": T0 + LATER})
        assert await cur.fetchone() == ("running", True)  # status, written
        cur = await conn.execute(
            "SELECT pg_stat_get_xact_tuples_updated(c.oid), pg_stat_get_xact_tuples_hot_updated(c.oid)"
            " FROM pg_class AS c WHERE c.relname = 'runlane_runs'"
        )
        assert await cur.fetchone() == (1, 1)


async def test_the_attribute_pages_migration_writes_the_entries_of_the_runs_it_finds(
    scratch_url: str,
) -> None:
    # Runs stored before version 23, one with a value longer than a btree entry may be: each
    # is found by each of its attributes once the migration has run.
    long = "".join(uuid.uuid4().hex for _ in range(200))
    runs = {
        "long": {"note": long, "customer": "acme"},
        "number": {"tier": 2.0, "customer": "acme"},
        "flag": {"vip": True},
        "plain": None,
    }
    with psycopg.connect(scratch_url, autocommit=True) as conn:
        for version, script in migrations("postgres")[:22]:
            conn.execute(script.encode())
            conn.execute("INSERT INTO runlane_schema_version (version) VALUES (%s)", (version,))
        for n, (run_id, attributes) in enumerate(runs.items()):
            conn.execute(
                "INSERT INTO runlane_runs (id, workflow, version, status, created_at, updated_at,"
                " attributes) VALUES (%s, 'wf', '1', 'pending', %s, %s, %s)",
                (
                    run_id,
                    T0 + LATER * n,
                    T0,
                    None if attributes is None else json.dumps(attributes),
                ),
            )
    filters: dict[str, dict[str, AttributeValue]] = {
        "note": {"note": long},
        "customer": {"customer": "acme"},
        "tier": {"tier": 2},
        "vip": {"vip": True},
    }
    store = PostgresStore(scratch_url)
    await store.open()
    try:
        found = {
            name: [run.id for run in await store.list_runs(attributes=wanted)]
            for name, wanted in filters.items()
        }
    finally:
        await store.close()
    assert found == {
        "note": ["long"],
        "customer": ["number", "long"],
        "tier": ["number"],
        "vip": ["flag"],
    }
    stored, wanted = entries(scratch_url)
    assert stored == wanted and len(stored) == 5


def entries(url: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The entries of runlane_attribute_runs, and those the runs' attributes should have."""
    with psycopg.connect(url) as conn:
        stored = conn.execute("SELECT entry, created_at, run_id FROM runlane_attribute_runs")
        wanted = conn.execute(_ENTRIES)
        return sorted(stored.fetchall()), sorted(wanted.fetchall())


async def test_the_attribute_entries_follow_every_write_of_the_runs(
    pg_store: PostgresStore, pg_url: str
) -> None:
    # A start with attributes and one without, a merge (a name set again to a new value, one to
    # an equal number, a new name), a merge of a run being cancelled (which writes nothing), a
    # prune: the entries are those of the runs' attributes, one each, every time.
    spec = RunSpec("a", "wf", "1", None, T0, attributes={"k": "v", "flag": True, "n": 2})
    await pg_store.create_runs([spec], T0, lease=Lease("o", T0 + LATER * 60))
    await pg_store.create_runs([RunSpec("b", "wf", "1", None, T0)], T0)
    stored, wanted = entries(pg_url)
    assert stored == wanted and len(stored) == 3
    await pg_store.set_attributes("a", "o", Writes(), {"k": "w", "n": 2.0, "x": 0.5}, T0)
    stored, wanted = entries(pg_url)
    assert stored == wanted and len(stored) == 4
    await pg_store.cancel_run("a", T0, None)
    with pytest.raises(RunCancelling):
        await pg_store.set_attributes("a", "o", Writes(), {"k": "z"}, T0)
    assert entries(pg_url) == (stored, stored)
    await pg_store.settle_run("a", "o", Writes(), Settlement(RunStatus.CANCELLED), T0)
    assert await pg_store.prune_runs({RunStatus.CANCELLED: T0 + LATER}, 10) == ["a"]
    assert entries(pg_url) == ([], [])


async def test_the_entries_follow_the_writes_of_an_engine_of_the_previous_version(
    scratch_url: str,
) -> None:
    # Its statements write the attributes alone, in a session that does not say it writes their
    # entries: the trigger of migration 0023 writes them (a start, a merge, a prune).
    await upgrade(scratch_url)
    with psycopg.connect(scratch_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO runlane_runs (id, workflow, version, status, created_at, updated_at,"
            " attributes) VALUES ('old', 'wf', '1', 'pending', %s, %s, %s)",
            (T0, T0, '{"customer": "acme", "n": 1}'),
        )
        conn.execute(
            "UPDATE runlane_runs SET attributes = attributes || '{\"n\": 2}' WHERE id = 'old'"
        )
        stored, wanted = entries(scratch_url)
        assert stored == wanted and len(stored) == 2
        store = PostgresStore(scratch_url)
        await store.open()
        try:
            assert [run.id for run in await store.list_runs(attributes={"n": 2})] == ["old"]
            assert await store.list_runs(attributes={"n": 1}) == []
        finally:
            await store.close()
        conn.execute("DELETE FROM runlane_runs WHERE id = 'old'")
    assert entries(scratch_url) == ([], [])


async def test_the_sessions_of_this_version_write_the_entries_without_the_trigger(
    scratch_url: str,
) -> None:
    await upgrade(scratch_url)
    with psycopg.connect(scratch_url, autocommit=True) as conn:
        conn.execute(
            "CREATE OR REPLACE FUNCTION runlane_attribute_entries() RETURNS trigger"
            " LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'the trigger fired'; END $$"
        )
    store = PostgresStore(scratch_url)
    await store.open()
    try:
        spec = RunSpec("a", "wf", "1", None, T0, attributes={"customer": "acme"})
        await store.create_runs([spec], T0, lease=Lease("o", T0 + LATER * 60))
        await store.set_attributes("a", "o", Writes(), {"customer": "globex"}, T0)
        stored, wanted = entries(scratch_url)
        assert stored == wanted and len(stored) == 1
        await store.settle_run("a", "o", Writes(), Settlement(RunStatus.COMPLETED), T0)
        assert await store.prune_runs({RunStatus.COMPLETED: T0 + LATER}, 10) == ["a"]
    finally:
        await store.close()
    assert entries(scratch_url) == ([], [])


async def test_retention_prunes_runs_an_engine_before_version_16_settled_by_updated_at(
    pg_store: PostgresStore, pg_url: str
) -> None:
    # Settled during an upgrade by an engine of the previous version: no settled_at.
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        for run_id, at in (("old", T0), ("recent", T0 + LATER * 100)):
            await conn.execute(
                "INSERT INTO runlane_runs (id, workflow, version, status, input, created_at,"
                " updated_at) VALUES (%s, 'wf', '1', 'completed', 'null', %s, %s)",
                (run_id, at, at),
            )
    spec = RunSpec("new", "wf", "1", None, T0)
    await pg_store.create_runs([spec], T0, lease=Lease("owner", T0 + LATER * 30))
    await pg_store.settle_run("new", "owner", Writes(), Settlement(RunStatus.COMPLETED), T0)
    cutoff = {RunStatus.COMPLETED: T0 + LATER * 50}
    assert sorted(await pg_store.prune_runs(cutoff, 10)) == ["new", "old"]
    assert (await pg_store.get_run("recent")) is not None


async def test_a_run_of_n_checkpoints_costs_n_plus_3_commits(scratch_url: str, pg_url: str) -> None:
    checkpoints, runs = 10, 5
    await upgrade(scratch_url)
    with psycopg.connect(scratch_url, autocommit=True) as conn:
        # Autovacuum's own transactions would be counted too.
        for table in ("runs", "steps", "signals", "events"):
            conn.execute(f"ALTER TABLE runlane_{table} SET (autovacuum_enabled = false)")
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as admin:
        baseline = await _commits_of(scratch_url, admin, 0, checkpoints)
        measured = await _commits_of(scratch_url, admin, runs, checkpoints)
    per_run = (measured - baseline) / runs
    print(
        f"\nPostgresStore: {per_run:g} commits per run of {checkpoints} checkpoints"
        f" (create + claim + {checkpoints} checkpoints + settle; N + 3 = {checkpoints + 3})"
    )
    assert per_run == checkpoints + 3


# ---------------------------------------------------------------- group commit of checkpoints


async def _leased(store: PostgresStore, *run_ids: str) -> None:
    await store.create_runs([RunSpec(r, "wf", "1", None, T0) for r in run_ids], T0)
    for r in run_ids:
        outcome = await store.claim_run(
            r, "owner", T0, T0 + timedelta(minutes=5), singleton_retry=NO_WAIT
        )
        assert outcome.claim is not None


def _statements(store: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the single statements ``store`` sends from now on."""
    sent: list[str] = []
    rows = store._db.rows

    async def recorded(name: str, /, **params: Any) -> Any:
        sent.append(name)
        return await rows(name, **params)

    monkeypatch.setattr(store._db, "rows", recorded)
    return sent


async def _thirty_leased(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[str], list[str]]:
    """Thirty runs leased to "owner", and the statements ``store`` sends from now on."""
    runs = [f"run-{i:02}" for i in range(30)]
    await _leased(store, *runs)
    return runs, _statements(store, monkeypatch)


def _record(run_id: str, **fields: Any) -> Writes:
    return Writes(steps=(StepRecord(run_id, 1, "s", "step", "completed", output=run_id, **fields),))


async def test_checkpoints_made_while_one_is_in_flight_are_written_by_one_statement(
    pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs, sent = await _thirty_leased(pg_store, monkeypatch)
    await asyncio.gather(*(pg_store.checkpoint(r, "owner", _record(r), T0) for r in runs))
    # The first goes alone at once; the other 29 wait for it, then go together.
    assert sent == ["checkpoint", "checkpoint_many"]
    for r in runs:
        [written] = await pg_store.list_steps(r)
        assert written.output == r
    sent.clear()
    await pg_store.checkpoint("run-00", "owner", _record("run-00"), T0)
    assert sent == ["checkpoint"]


async def test_a_run_whose_records_fail_the_group_statement_fails_alone(
    pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = ["lead", "good-1", "bad", "good-2"]
    await _leased(pg_store, *runs)
    sent = _statements(pg_store, monkeypatch)
    writes = {r: _record(r, attempts=2**40 if r == "bad" else 1) for r in runs}
    outcomes = await asyncio.gather(
        *(pg_store.checkpoint(r, "owner", writes[r], T0) for r in runs), return_exceptions=True
    )
    expected = ["checkpoint", "checkpoint_many", "checkpoint", "checkpoint", "checkpoint"]
    assert sent == expected, (sent, outcomes)
    assert isinstance(outcomes[2], psycopg.errors.NumericValueOutOfRange)
    assert [outcomes[i] for i in (0, 1, 3)] == [[], [], []]
    assert [len(await pg_store.list_steps(r)) for r in runs] == [1, 1, 0, 1]


# ---------------------------------------------------------------- remote steps under contention


async def _suspended_on_remote_step(
    store: PostgresStore, run_id: str, wake_at: datetime | None = None
) -> None:
    """A run suspended (until ``wake_at``) while a worker runs attempt 1 of its step 1."""
    await store.create_runs([RunSpec(run_id, "wf", "1", None, T0)], T0)
    outcome = await store.claim_run(
        run_id, "owner", T0, T0 + timedelta(minutes=5), singleton_retry=NO_WAIT
    )
    assert outcome.claim is not None
    record = StepRecord(run_id, 1, "remote", "step", "running", attempts=1, dispatches=1)
    await store.suspend_run(run_id, "owner", Writes(steps=(record,)), wake_at, T0)


async def _wait_until_blocked(pg_url: str, task: asyncio.Task[Any]) -> None:
    """Return once ``task`` finished or a backend of the database waits on a lock (5 s at most)."""
    query = (
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        deadline = time.monotonic() + 5
        while not task.done() and time.monotonic() < deadline:
            row = await (await conn.execute(query)).fetchone()
            if row is not None and row[0] > 0:
                return
            await asyncio.sleep(0.02)
    assert task.done(), "the call neither finished nor waited on a lock within 5 s"


async def test_a_result_waiting_behind_a_concurrent_write_of_the_step_is_a_duplicate(
    pg_store: PostgresStore, pg_url: str
) -> None:
    await _suspended_on_remote_step(pg_store, "a")
    async with await psycopg.AsyncConnection.connect(pg_url) as other:
        # Another report of the same attempt, holding the run's lock while it writes the step.
        await other.execute("SELECT 1 FROM runlane_runs WHERE id = 'a' FOR NO KEY UPDATE")
        await other.execute(
            "UPDATE runlane_steps SET status = 'completed', output = '\"first\"'"
            " WHERE run_id = 'a' AND seq = 1"
        )
        late = asyncio.create_task(
            pg_store.record_step_result("a", 1, 1, True, "second", None, T0 + LATER)
        )
        await _wait_until_blocked(pg_url, late)
        await other.commit()
    assert await late == "duplicate"
    record = await pg_store.get_step("a", 1)
    assert record is not None and record.output == "first"


async def test_a_heartbeat_waiting_behind_a_settlement_of_the_run_is_refused(
    pg_store: PostgresStore, pg_url: str
) -> None:
    await _suspended_on_remote_step(pg_store, "a")
    async with await psycopg.AsyncConnection.connect(pg_url) as other:
        await other.execute("UPDATE runlane_runs SET status = 'cancelled' WHERE id = 'a'")
        beat = asyncio.create_task(pg_store.record_heartbeat("a", 1, 1, T0 + LATER))
        await _wait_until_blocked(pg_url, beat)
        await other.commit()
    assert await beat is False
    record = await pg_store.get_step("a", 1)
    assert record is not None and record.last_heartbeat_at is None


async def test_hand_off_skips_a_due_run_another_transaction_holds(
    pg_store: PostgresStore, pg_url: str
) -> None:
    for run_id in ("a", "b"):
        await _suspended_on_remote_step(pg_store, run_id, wake_at=T0)
    async with await psycopg.AsyncConnection.connect(pg_url) as other:
        await other.execute("SELECT 1 FROM runlane_runs WHERE id = 'a' FOR NO KEY UPDATE")
        taken = await asyncio.wait_for(
            pg_store.hand_off_due_runs(T0, 10, None, T0 + LATER), timeout=5
        )
        await other.rollback()
    assert [run.id for run in taken] == ["b"]
    assert (await pg_store.hand_off_due_runs(T0, 10, None, T0 + LATER))[0].id == "a"


async def test_the_lanes_migration_moves_existing_singleton_runs_into_their_workflows_lane(
    scratch_url: str,
) -> None:
    with psycopg.connect(scratch_url, autocommit=True) as conn:
        for version, script in migrations("postgres")[:3]:
            conn.execute(script.encode())
            conn.execute("INSERT INTO runlane_schema_version (version) VALUES (%s)", (version,))
        for run_id, workflow, key, quota in [
            ("holder", "sync", "store:A", None),
            ("other", "report", "store:A", None),
            ("q", "job", None, "tenant:acme"),
        ]:
            conn.execute(
                "INSERT INTO runlane_runs (id, workflow, version, status, tags, created_at,"
                " updated_at, singleton_key, singleton_limit, holds_slot, concurrency_key)"
                " VALUES (%s, %s, '1', 'suspended', '{mine}', now(), now(), %s, 1, %s, %s)",
                (run_id, workflow, key, key is not None, quota),
            )
    store = PostgresStore(scratch_url)
    await store.open()
    try:
        holder, other, q = [await store.get_run(i) for i in ("holder", "other", "q")]
    finally:
        await store.close()
    assert holder is not None and other is not None and q is not None
    # The lanes new starts of those workflows compete in (so they queue behind the holder).
    assert holder.singleton_key == lane("workflow", "sync", "store:A") == "4:sync:store:A"
    assert other.singleton_key == lane("workflow", "report", "store:A")
    assert holder.tags == ("mine", "singleton:store:A")
    assert q.tags == ("mine", "concurrency:tenant:acme")
    assert (q.concurrency_limit, holder.admission_retries) == (None, 0)


async def test_a_handed_off_timer_waits_out_a_row_lock_instead_of_leaving_the_run_a_lease(
    pg_store: PostgresStore, pg_url: str
) -> None:
    # hand_off_due_runs holds a due run a lease ahead while its message travels; the claim that
    # message brings must not skip the run because a signal or a result held its row that
    # instant (SKIP LOCKED), or the run would wait out the whole hold.
    await pg_store.create_runs([RunSpec("h", "wf", "1", None, T0)], T0)
    outcome = await pg_store.claim_run(
        "h", "o1", T0, T0 + timedelta(seconds=30), singleton_retry=NO_WAIT
    )
    assert outcome.claim is not None
    await pg_store.suspend_run("h", "o1", Writes(), T0, T0)
    now = T0 + timedelta(seconds=1)
    [held] = await pg_store.hand_off_due_runs(now, 10, None, now + timedelta(seconds=30))
    assert held.id == "h"
    with psycopg.connect(pg_url) as locker:
        locker.execute("SELECT 1 FROM runlane_runs WHERE id = 'h' FOR NO KEY UPDATE")
        claiming = asyncio.create_task(
            pg_store.claim_run(
                "h", "o2", now, now + timedelta(seconds=30), handoff=True, singleton_retry=NO_WAIT
            )
        )
        await asyncio.sleep(0.3)  # the claim meets the lock
        locker.commit()
    claimed = await asyncio.wait_for(claiming, 10)
    assert claimed.claim is not None and claimed.claim.run.lease_owner == "o2"


async def test_a_signal_that_waited_for_the_suspending_turn_sees_its_wait_and_wakes_the_run(
    pg_store: PostgresStore, pg_url: str
) -> None:
    # The turn's suspension (the run suspended, its signal wait recorded) commits while the
    # signal waits for the run's row: the signal must see that wait and wake the run.
    await pg_store.create_runs([RunSpec("s", "wf", "1", None, T0)], T0)
    outcome = await pg_store.claim_run(
        "s", "o1", T0, T0 + timedelta(seconds=30), singleton_retry=NO_WAIT
    )
    assert outcome.claim is not None
    with psycopg.connect(pg_url) as turn:
        turn.execute(
            "UPDATE runlane_runs SET status = 'suspended', lease_owner = NULL,"
            " lease_expires_at = NULL WHERE id = 's'"
        )
        turn.execute(
            "INSERT INTO runlane_steps (run_id, seq, name, kind, status, attempts)"
            " VALUES ('s', 1, 'go', 'signal', 'pending', 0)"
        )
        signalled = asyncio.create_task(pg_store.deliver_signal("s", "go", "now", T0))
        await asyncio.sleep(0.3)  # the signal waits for the row
        turn.commit()
    assert await asyncio.wait_for(signalled, 10) is True
    run = await pg_store.get_run("s")
    assert run is not None and run.wake_at is not None


async def test_a_run_known_to_have_no_singleton_key_settles_in_one_statement(
    pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _leased(pg_store, "plain")
    sent = _statements(pg_store, monkeypatch)
    done = Settlement(RunStatus.COMPLETED, "ok")
    await pg_store.settle_run("plain", "owner", _record("plain"), done, T0, keyed=False)
    assert sent == ["settle"]  # no key lock: the run has no key to lock
    settled = await pg_store.get_run("plain")
    assert settled is not None and settled.status == RunStatus.COMPLETED
    assert [s.output for s in await pg_store.list_steps("plain")] == ["plain"]


# ---------------------------------------------------------------- group commit of settlements

DONE = Settlement(RunStatus.COMPLETED, "ok")


async def test_settlements_made_while_one_is_in_flight_are_written_by_one_statement(
    pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs, sent = await _thirty_leased(pg_store, monkeypatch)
    await asyncio.gather(
        *(pg_store.settle_run(r, "owner", _record(r), DONE, T0, keyed=False) for r in runs)
    )
    assert sent == ["settle", "settle_many"]  # the first alone at once, the 29 others together
    for r in runs:
        run = await pg_store.get_run(r)
        assert run is not None and (run.status, run.output, run.lease_owner) == (
            RunStatus.COMPLETED,
            "ok",
            None,
        )
        assert [s.output for s in await pg_store.list_steps(r)] == [r]


async def test_each_settlement_of_a_group_is_fenced_on_its_own(
    pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runlane.errors import LeaseLostError, RunCancelling

    runs = ["lead", "lost", "cancelling", "cancelled", "child"]
    await _leased(pg_store, *runs)
    parent = RunSpec("parent", "wf", "1", None, T0)
    await pg_store.create_runs([parent], T0)
    await pg_store.claim_run("parent", "p", T0, T0 + timedelta(minutes=5), singleton_retry=NO_WAIT)
    await pg_store.suspend_run("parent", "p", Writes(), None, T0)
    async with await psycopg.AsyncConnection.connect(pg_store.url, autocommit=True) as conn:
        await conn.execute("UPDATE runlane_runs SET parent_id = 'parent' WHERE id = 'child'")
        await conn.execute("UPDATE runlane_runs SET lease_owner = 'other' WHERE id = 'lost'")
        await conn.execute(
            "UPDATE runlane_runs SET status = 'cancelling' WHERE id IN ('cancelling', 'cancelled')"
        )
    sent = _statements(pg_store, monkeypatch)
    cancelled = Settlement(RunStatus.CANCELLED)
    outcomes = await asyncio.gather(
        *(
            pg_store.settle_run(
                r, "owner", Writes(), cancelled if r == "cancelled" else DONE, T0, keyed=False
            )
            for r in runs
        ),
        return_exceptions=True,
    )
    assert sent == ["settle", "settle_many"]
    lead, lost, cancelling, was_cancelled, child = outcomes
    assert isinstance(lost, LeaseLostError) and isinstance(cancelling, RunCancelling)
    assert lead.woken == [] and was_cancelled.woken == []  # type: ignore[union-attr]
    assert child.woken == ["parent"]  # type: ignore[union-attr]
    statuses = {r: (await pg_store.get_run(r)).status for r in [*runs, "parent"]}  # type: ignore[union-attr]
    assert statuses == {
        "lead": RunStatus.COMPLETED,
        "lost": RunStatus.RUNNING,
        "cancelling": RunStatus.CANCELLING,
        "cancelled": RunStatus.CANCELLED,
        "child": RunStatus.COMPLETED,
        "parent": RunStatus.SUSPENDED,
    }
    parent_run = await pg_store.get_run("parent")
    assert parent_run is not None and parent_run.wake_at == T0  # woken by its child


# ---------------------------------------------------------------- group commit under keys


async def _keys_held(store: PostgresStore, n: int) -> list[str]:
    """``n`` keys, each with a holder leased to "owner" (``holder-i``) and a waiter parked
    behind it (``waiter-i``); the holders' ids."""
    for i in range(n):
        gate = SingletonGate(f"key-{i}")
        await store.create_runs([RunSpec(f"holder-{i}", "wf", "1", None, T0, singleton=gate)], T0)
        claimed = await store.claim_run(
            f"holder-{i}", "owner", T0, T0 + timedelta(minutes=5), singleton_retry=NO_WAIT
        )
        assert claimed.claim is not None and claimed.claim.run.holds_slot
        later = T0 + timedelta(seconds=1)
        waiter = RunSpec(f"waiter-{i}", "wf", "1", None, later, singleton=gate)
        [parked] = await store.create_runs([waiter], later)
        assert parked.run is not None and parked.run.status == RunStatus.BLOCKED
    return [f"holder-{i}" for i in range(n)]


def _one_keyed_group(store: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's keyed settlements in one group at a time, so which settlement goes with
    which is fixed by arrival alone."""
    monkeypatch.setattr(store, "_keyed", KeyedSettlements(store._db, 100, in_flight=1))


async def test_settlements_under_keys_made_while_one_is_in_flight_go_together(
    pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runlane.errors import LeaseLostError

    _one_keyed_group(pg_store, monkeypatch)
    holders = await _keys_held(pg_store, 5)
    async with await psycopg.AsyncConnection.connect(pg_store.url, autocommit=True) as conn:
        await conn.execute("UPDATE runlane_runs SET lease_owner = 'other' WHERE id = 'holder-3'")
    sent = _units(pg_store, monkeypatch)
    successor = Lease("next", T0 + timedelta(minutes=5))
    outcomes = await asyncio.gather(
        *(
            pg_store.settle_run(h, "owner", _record(h), DONE, T0, successor=successor)
            for h in holders
        ),
        return_exceptions=True,
    )
    # The first alone at once; the others wait for it, then go together: their keys' locks
    # first, then each settlement.
    assert sent == [
        ["lock_keys", "settle"],
        ["lock_keys_of_runs", "lock_parents_of_runs", *["settle"] * 4],
    ]
    assert isinstance(outcomes[3], LeaseLostError)  # its own fence failed, and only its own
    for i in (0, 1, 2, 4):
        handed = outcomes[i].successor  # type: ignore[union-attr]
        assert handed is not None and handed.run.id == f"waiter-{i}"
        assert (handed.run.lease_owner, handed.run.holds_slot) == ("next", True)
        settled = await pg_store.get_run(f"holder-{i}")
        assert settled is not None and settled.status == RunStatus.COMPLETED
        assert [s.output for s in await pg_store.list_steps(f"holder-{i}")] == [f"holder-{i}"]
    kept = await pg_store.get_run("holder-3")
    assert kept is not None and (kept.status, kept.holds_slot) == (RunStatus.RUNNING, True)
    waiting = await pg_store.get_run("waiter-3")
    assert waiting is not None and waiting.status == RunStatus.BLOCKED


async def test_a_settlement_under_a_key_whose_value_fails_the_group_fails_alone(
    pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _one_keyed_group(pg_store, monkeypatch)
    holders = await _keys_held(pg_store, 4)
    sent = _units(pg_store, monkeypatch)
    outcomes = await asyncio.gather(
        *(
            pg_store.settle_run(
                h, "owner", _record(h, attempts=2**40 if h == "holder-2" else 1), DONE, T0
            )
            for h in holders
        ),
        return_exceptions=True,
    )
    assert sent == [
        ["lock_keys", "settle"],
        # Refused whole: nothing committed.
        ["lock_keys_of_runs", "lock_parents_of_runs", "settle", "settle", "settle"],
        *[["lock_keys", "settle"]] * 3,
    ]
    assert isinstance(outcomes[2], psycopg.errors.NumericValueOutOfRange)
    statuses = [(await pg_store.get_run(h)).status for h in holders]  # type: ignore[union-attr]
    assert statuses == [RunStatus.COMPLETED] * 2 + [RunStatus.RUNNING, RunStatus.COMPLETED]
    for i in (0, 1, 3):  # each freed key woke its waiter (no successor was asked for)
        assert outcomes[i].woken == [f"waiter-{i}"]  # type: ignore[union-attr]
    waiting = await pg_store.get_run("waiter-2")
    assert waiting is not None and waiting.status == RunStatus.BLOCKED  # still behind its key


async def test_two_groups_of_settlements_under_keys_are_in_flight_at_once(
    pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    holders = await _keys_held(pg_store, 6)
    sent = _units(pg_store, monkeypatch)
    batch, flying, most = pg_store._db.batch, 0, 0

    async def counted(*calls: Any) -> Any:
        nonlocal flying, most
        flying += 1
        most = max(most, flying)
        try:
            return await batch(*calls)
        finally:
            flying -= 1

    monkeypatch.setattr(pg_store._db, "batch", counted)
    successor = Lease("next", T0 + timedelta(minutes=5))
    outcomes = await asyncio.gather(
        *(
            pg_store.settle_run(h, "owner", _record(h), DONE, T0, successor=successor)
            for h in holders
        )
    )
    # The first two go at once, each alone and in a group of its own; the four that came
    # meanwhile join the group with the fewer writes, two and two.
    assert most == 2
    assert sorted(sent) == sorted(
        [["lock_keys", "settle"]] * 2
        + [["lock_keys_of_runs", "lock_parents_of_runs", "settle", "settle"]] * 2
    )
    for i, outcome in enumerate(outcomes):
        handed = outcome.successor
        assert handed is not None and handed.run.id == f"waiter-{i}"
        assert (handed.run.lease_owner, handed.run.holds_slot) == ("next", True)
        settled = await pg_store.get_run(f"holder-{i}")
        assert settled is not None and settled.status == RunStatus.COMPLETED


async def test_two_groups_under_keys_waking_the_same_parents_never_deadlock(
    pg_store: PostgresStore,
) -> None:
    # Six keyed children: the first two go alone (one group each), the other four two and two:
    # the groups [holder-1, holder-4] and [holder-3, holder-5] wake the parents "p1", "p2" in
    # opposite orders. Each group locks the parents' rows in id order first, so neither waits
    # on the other in a cycle. (Whether the two pipelines interleave so as to deadlock without
    # that is up to timing: the statement's locks are checked on their own below.)
    holders = await _keys_held(pg_store, 6)
    parent_of = ["p1", "p1", "p2", "p2", "p2", "p1"]
    for parent in ("p1", "p2"):
        await pg_store.create_runs([RunSpec(parent, "wf", "1", None, T0)], T0)
        await pg_store.claim_run(
            parent, "p", T0, T0 + timedelta(minutes=5), singleton_retry=NO_WAIT
        )
        await pg_store.suspend_run(parent, "p", Writes(), None, T0)
    async with await psycopg.AsyncConnection.connect(pg_store.url, autocommit=True) as conn:
        for holder, parent in zip(holders, parent_of, strict=True):
            await conn.execute(
                "UPDATE runlane_runs SET parent_id = %s WHERE id = %s", (parent, holder)
            )
        deadlocks = "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        before = (await (await conn.execute(deadlocks)).fetchone())[0]  # type: ignore[index]
        outcomes = await asyncio.gather(
            *(pg_store.settle_run(h, "owner", _record(h), DONE, T0) for h in holders)
        )
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        after = (await (await conn.execute(deadlocks)).fetchone())[0]  # type: ignore[index]
    assert after == before
    for i, outcome in enumerate(outcomes):
        assert set(outcome.woken) == {f"waiter-{i}", parent_of[i]}
    for parent in ("p1", "p2"):
        woken = await pg_store.get_run(parent)
        assert woken is not None and woken.wake_at == T0
    # The statement locks the parents' rows, and only theirs, until its transaction ends.
    async with (
        await psycopg.AsyncConnection.connect(pg_store.url) as locking,
        await psycopg.AsyncConnection.connect(pg_store.url, autocommit=True) as other,
    ):
        cur = await locking.execute(SQL["lock_parents_of_runs"], {"ids": ["holder-5", "holder-4"]})
        assert [row[0] for row in await cur.fetchall()] == ["p1", "p2"]  # id order
        for parent in ("p1", "p2"):
            with pytest.raises(psycopg.errors.LockNotAvailable):
                await other.execute("SELECT FROM runlane_runs WHERE id = %s FOR UPDATE NOWAIT",
                                    (parent,))  # fmt: skip
        await other.execute("SELECT FROM runlane_runs WHERE id = 'holder-5' FOR UPDATE NOWAIT")
        await locking.rollback()
        await other.execute("SELECT FROM runlane_runs WHERE id = 'p1' FOR UPDATE NOWAIT")


# ---------------------------------------------------------------- group commit across kinds


def _units(store: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The statements of each single-statement call and each pipeline ``store`` sends."""
    sent: list[list[str]] = []
    rows, batch = store._db.rows, store._db.batch

    async def one(name: str, /, **params: Any) -> Any:
        sent.append([name])
        return await rows(name, **params)

    async def several(*calls: Any) -> Any:
        sent.append([call[0] for call in calls if call is not None])
        return await batch(*calls)

    monkeypatch.setattr(store._db, "rows", one)
    monkeypatch.setattr(store._db, "batch", several)
    return sent


async def test_checkpoints_and_settlements_made_while_one_is_in_flight_go_together(
    pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _leased(pg_store, "lead", "cp-1", "cp-2", "done")
    sent = _units(pg_store, monkeypatch)
    await asyncio.gather(
        pg_store.checkpoint("lead", "owner", _record("lead"), T0),
        pg_store.checkpoint("cp-1", "owner", _record("cp-1"), T0),
        pg_store.settle_run("done", "owner", _record("done"), DONE, T0, keyed=False),
        pg_store.checkpoint("cp-2", "owner", _record("cp-2"), T0),
    )
    # The first goes alone at once; the others wait for it, then go in one round trip.
    assert sent == [["checkpoint"], ["checkpoint_many", "settle"]]
    for r in ("lead", "cp-1", "cp-2", "done"):
        assert [s.output for s in await pg_store.list_steps(r)] == [r]
    settled = await pg_store.get_run("done")
    assert settled is not None and settled.status == RunStatus.COMPLETED


async def test_a_start_does_not_wait_for_the_writes_in_flight(
    pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _leased(pg_store, "lead", "other")
    sent = _units(pg_store, monkeypatch)
    await asyncio.gather(
        pg_store.checkpoint("lead", "owner", _record("lead"), T0),
        pg_store.create_runs([RunSpec("new", "wf", "1", None, T0)], T0),
        pg_store.checkpoint("other", "owner", _record("other"), T0),
    )
    assert sent == [["checkpoint"], ["insert_runs"], ["checkpoint"]]


async def test_a_write_whose_value_fails_the_shared_pipeline_fails_alone(
    pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _leased(pg_store, "lead", "bad", "done")
    sent = _units(pg_store, monkeypatch)
    outcomes = await asyncio.gather(
        pg_store.checkpoint("lead", "owner", _record("lead"), T0),
        pg_store.checkpoint("bad", "owner", _record("bad", attempts=2**40), T0),
        pg_store.settle_run("done", "owner", _record("done"), DONE, T0, keyed=False),
        return_exceptions=True,
    )
    assert sent == [
        ["checkpoint"],
        ["checkpoint", "settle"],  # refused whole: nothing of it committed
        ["checkpoint"],
        ["settle"],
    ]
    assert outcomes[0] == [] and isinstance(outcomes[1], psycopg.errors.NumericValueOutOfRange)
    assert [len(await pg_store.list_steps(r)) for r in ("lead", "bad", "done")] == [1, 0, 1]
    settled = await pg_store.get_run("done")
    assert settled is not None and settled.status == RunStatus.COMPLETED


async def test_a_batch_of_gated_starts_is_one_pipeline(
    pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    units: list[str] = []
    db = pg_store._db
    for unit in ("batch", "rows", "tx", "run"):
        original = getattr(db, unit)

        def counted(*args: Any, _unit: str = unit, _original: Any = original, **kw: Any) -> Any:
            units.append(_unit)
            return _original(*args, **kw)

        monkeypatch.setattr(db, unit, counted)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    lane_gate = SingletonGate("k", 1, max_queue_depth=5, retry=0.0)
    specs = [
        RunSpec(f"r{n}", "wf", "1", None, now + timedelta(microseconds=n), singleton=lane_gate)
        for n in range(5)
    ]
    specs += [RunSpec(f"q{n}", "wf", "1", None, now, quota=QuotaGate("q", 3)) for n in range(5)]
    specs += [RunSpec(f"t{n}", "wf", "1", None, now, rate=RateGate("r", 2, 60.0)) for n in range(3)]
    specs += [RunSpec("plain", "wf", "1", None, now)]
    started = await pg_store.create_runs(specs, now)
    assert units == ["batch", "run"]  # one pipeline on one pooled connection: one round trip
    lanes, quotas, rates = [True] * 5, [True] * 3 + [False] * 2, [True, True, False]
    assert [s.created for s in started] == [*lanes, *quotas, *rates, True]
