"""The Store contract (``runlane.stores.base``), clause by clause, as pytest tests.

Every store runlane ships passes it (``tests/contract/``), and so can yours: import the tests
into a test module and give them a ``make_store`` fixture that builds a new, unopened store
object on your backend (each call the same backend, as a second engine would open it)::

    import pytest
    from runlane.testing.store_contract import *  # noqa: F403  the contract's tests and fixtures

    @pytest.fixture
    def make_store():
        return lambda: MyStore("mystore://test")

Each test gets ``store``: one of them, opened, emptied by its ``reset_for_tests()`` if it has one,
and closed afterwards; a test that needs a second object on the same backend calls
``make_store()``. Those two are the only fixtures a test here may ask for (besides pytest's own):
a user's test module has no other (``tests/unit/test_contract_suites.py`` keeps it so). The suite
needs pytest and pytest-asyncio (strict or auto mode); importing this module, unlike
``import runlane``, imports them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any

import pytest
import pytest_asyncio

from runlane.activity import ActivityCount, latency_bucket
from runlane.attributes import AttributeValue
from runlane.errors import (
    ConcurrencyLimitError,
    DefinitionError,
    LeaseLostError,
    RateLimitError,
    RunCancelling,
    RunExistsError,
    RunFinishedError,
    RunNotFoundError,
    RunPausing,
    SingletonQueueFullError,
)
from runlane.models import (
    AuditEntry,
    CancelResult,
    ClaimOutcome,
    DebounceGate,
    EngineInfo,
    Lease,
    QueueSettings,
    QuotaGate,
    RateGate,
    RetryTimer,
    Run,
    RunCursor,
    RunQuery,
    RunSpec,
    RunStatus,
    Serves,
    Settlement,
    SingletonGate,
    StepKind,
    StepRecord,
    StepStatus,
    WindowFire,
    Writes,
    buffered_name,
)
from runlane.step_queues import QueueRequest
from runlane.stores.base import Store
from runlane.testing._suite import export_tests

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LEASE = timedelta(seconds=30)
RETRY = timedelta(seconds=5)
DONE = Settlement(RunStatus.COMPLETED, {"ok": True})


@pytest_asyncio.fixture
async def store(make_store: Callable[[], Store]) -> AsyncIterator[Store]:
    """An opened, empty store built by ``make_store``, closed after the test."""
    opened = make_store()
    await opened.open()
    reset = getattr(opened, "reset_for_tests", None)
    if reset is not None:
        await reset()
    try:
        yield opened
    finally:
        await opened.close()


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def spec(run_id: str, *, created: float = 0.0, workflow: str = "wf", **fields: Any) -> RunSpec:
    return RunSpec(
        id=run_id,
        workflow=workflow,
        version="1",
        input={"id": run_id},
        created_at=at(created),
        **fields,
    )


def key(limit: int = 1, **fields: Any) -> SingletonGate:
    """A singleton gate; a run created behind its full key is due at once unless ``retry``
    says otherwise (so a claim at any instant finds it due, as before its first denial)."""
    return SingletonGate("k", limit, **{"retry": 0.0, **fields})


def step(run_id: str, seq: int, status: str = StepStatus.COMPLETED, **fields: Any) -> StepRecord:
    fields.setdefault("name", f"step{seq}")
    fields.setdefault("kind", StepKind.STEP)
    return StepRecord(run_id=run_id, seq=seq, status=status, **fields)


async def create(store: Store, *specs: RunSpec, now: datetime = T0) -> list[Run]:
    started = await store.create_runs(specs, now)
    assert all(s.created and s.run is not None for s in started), started
    return [s.run for s in started if s.run is not None]


async def claim(
    store: Store,
    run_id: str,
    *,
    owner: str = "owner-1",
    now: datetime = T0,
    max_recoveries: int | None = None,
    handoff: bool = False,
    dead_letters: frozenset[str] = frozenset(),
    serves: Serves | None = None,
) -> ClaimOutcome:
    return await store.claim_run(
        run_id,
        owner,
        now,
        now + LEASE,
        singleton_retry=RetryTimer(RETRY.total_seconds(), 3600.0),
        max_recoveries=max_recoveries,
        handoff=handoff,
        dead_letters=dead_letters,
        serves=serves,
    )


async def lease(
    store: Store,
    run_id: str,
    *,
    owner: str = "owner-1",
    now: datetime = T0,
    handoff: bool = False,
) -> Run:
    outcome = await claim(store, run_id, owner=owner, now=now, handoff=handoff)
    assert outcome.claim is not None, outcome
    return outcome.claim.run


async def suspend(
    store: Store,
    run_id: str,
    wake_at: datetime | None = None,
    *,
    writes: Writes | None = None,
    now: datetime = T0,
) -> bool:
    """Claim the run and suspend it, as one turn would."""
    await lease(store, run_id, now=now)
    return await store.suspend_run(run_id, "owner-1", writes or Writes(), wake_at, now)


async def settle(
    store: Store, run_id: str, settlement: Settlement = DONE, *, now: datetime = T0
) -> list[str]:
    """Claim the run and settle it, as one turn would."""
    await lease(store, run_id, now=now)
    return (await store.settle_run(run_id, "owner-1", Writes(), settlement, now)).woken


async def run_of(store: Store, run_id: str) -> Run:
    run = await store.get_run(run_id)
    assert run is not None, run_id
    return run


async def status_of(store: Store, run_id: str) -> RunStatus:
    return (await run_of(store, run_id)).status


def waits_for_signal(run_id: str, name: str) -> Writes:
    return Writes(steps=[step(run_id, 1, StepStatus.PENDING, name=name, kind=StepKind.SIGNAL)])


def waits_for_event(run_id: str, name: str) -> Writes:
    return Writes(steps=[step(run_id, 1, StepStatus.PENDING, name=name, kind=StepKind.EVENT)])


def remote(run_id: str, seq: int = 1, attempt: int = 1, **fields: Any) -> StepRecord:
    """A remote step's record while a worker runs ``attempt`` of it."""
    fields.setdefault("started_at", T0)
    fields.setdefault("dispatches", 1)
    return step(run_id, seq, StepStatus.RUNNING, input={"n": seq}, attempts=attempt, **fields)


async def dispatched(store: Store, run_id: str, *records: StepRecord) -> None:
    """Create the run and suspend it, until woken, on the remote step ``records``."""
    await create(store, spec(run_id))
    await suspend(store, run_id, None, writes=Writes(steps=list(records or [remote(run_id)])))


# ---------------------------------------------------------------- open / close


async def test_open_again_and_close_once_leave_the_store_usable(store: Store) -> None:
    await store.open()
    await store.close()
    await create(store, spec("a"))
    assert (await run_of(store, "a")).status == RunStatus.PENDING


# ---------------------------------------------------------------- create_runs


async def test_create_returns_one_pending_run_per_spec_in_order(store: Store) -> None:
    started = await store.create_runs([spec("b"), spec("a", tags=("x",), priority=3)], at(1))
    assert [s.run.id for s in started if s.run] == ["b", "a"]
    assert all(s.created and s.rejected is None for s in started)
    a = await run_of(store, "a")
    assert a.status == RunStatus.PENDING
    assert (a.input, a.tags, a.priority, a.created_at) == ({"id": "a"}, ("x",), 3, T0)
    assert a.output is None and a.error is None and a.wake_at is None


async def test_timestamps_come_back_as_timezone_aware_utc(store: Store) -> None:
    when = datetime(2026, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
    await store.create_runs([RunSpec("a", "wf", "1", None, when, deadline_at=when)], when)
    run = await run_of(store, "a")
    assert run.created_at == when and run.deadline_at == when
    assert run.created_at.utcoffset() == timedelta(0)


async def test_create_with_an_existing_id_returns_it_without_admission(store: Store) -> None:
    quota = QuotaGate("q", limit=1)
    await create(store, spec("a", quota=quota))
    [again] = await store.create_runs([spec("a", quota=quota)], at(1))
    assert again.created is False and again.rejected is None
    assert again.run is not None and again.run.id == "a" and again.run.created_at == T0


async def test_quota_refusal_writes_nothing_and_spares_other_specs(store: Store) -> None:
    quota = QuotaGate("q", limit=1)
    await create(store, spec("a", quota=quota))
    refused, other = await store.create_runs([spec("b", quota=quota), spec("c")], T0)
    assert refused.run is None and refused.created is False
    assert isinstance(refused.rejected, ConcurrencyLimitError)
    assert (refused.rejected.key, refused.rejected.limit, refused.rejected.active) == ("q", 1, 1)
    assert other.created
    assert await store.get_run("b") is None


async def test_quota_counts_only_runs_in_the_gate_count_statuses(store: Store) -> None:
    running_only = QuotaGate("q", limit=1, count_statuses=frozenset({RunStatus.RUNNING}))
    await create(store, spec("a", quota=running_only), spec("b", quota=running_only))
    await lease(store, "a")
    [refused] = await store.create_runs([spec("c", quota=running_only)], T0)
    assert isinstance(refused.rejected, ConcurrencyLimitError)
    await store.settle_run("a", "owner-1", Writes(), DONE, T0)
    [admitted] = await store.create_runs([spec("c", quota=running_only)], T0)
    assert admitted.created


async def test_quota_with_a_zero_limit_refuses_every_start(store: Store) -> None:
    [refused] = await store.create_runs([spec("a", quota=QuotaGate("q", limit=0))], T0)
    assert isinstance(refused.rejected, ConcurrencyLimitError)


async def test_queue_depth_refuses_when_the_key_has_limit_plus_depth_active_runs(
    store: Store,
) -> None:
    gate = key(limit=1, max_queue_depth=1)
    await create(store, spec("a", singleton=gate), spec("b", singleton=gate))
    [refused] = await store.create_runs([spec("c", singleton=gate)], T0)
    assert isinstance(refused.rejected, SingletonQueueFullError)
    assert await store.get_run("c") is None
    await settle(store, "a")
    [admitted] = await store.create_runs([spec("c", singleton=gate)], T0)
    assert admitted.created


async def test_a_start_behind_a_full_key_is_created_waiting(store: Store) -> None:
    gate = key(limit=2)
    [first, second] = await store.create_runs(
        [spec("a", singleton=gate), spec("b", created=1, singleton=gate)], T0
    )
    assert not first.waiting and not second.waiting  # two slots: both admissible at once
    [third] = await store.create_runs([spec("c", created=2, singleton=gate)], T0)
    assert third.created and third.waiting
    # Parked as a denied claim would park it: no claim is spent on it before a release.
    waiting = await run_of(store, "c")
    assert third.run == waiting and waiting.status == RunStatus.BLOCKED
    assert waiting.wake_at == T0 and waiting.admission_retries == 1  # due after gate.retry
    assert "c" not in await store.pending_run_ids(at(3), 10, None)
    [plain] = await store.create_runs([spec("plain", created=3)], T0)
    assert not plain.waiting
    await settle(store, "a")
    [fourth] = await store.create_runs([spec("d", created=4, singleton=gate)], T0)
    assert fourth.waiting  # b holds or waits, c waits: two ahead of d
    [again] = await store.create_runs([spec("c", created=2, singleton=gate)], T0)
    assert not again.created and not again.waiting
    # A replacing start waits for the runs it cancels to settle, not behind them: not parked.
    [replacing] = await store.create_runs(
        [spec("r", created=5, singleton=key(limit=2, replace=True, retry=1.0))], T0
    )
    assert replacing.created and not replacing.waiting
    assert await status_of(store, "r") == RunStatus.PENDING


async def test_a_start_is_parked_only_behind_runs_ahead_of_it_in_fifo_order(store: Store) -> None:
    gate = key(limit=1)
    [d] = await store.create_runs([spec("d", singleton=gate)], T0)
    assert not d.waiting
    # The same instant and a smaller id: "a" comes before "d" in FIFO order, nothing is ahead.
    [a] = await store.create_runs([spec("a", singleton=gate)], T0)
    assert not a.waiting and await status_of(store, "a") == RunStatus.PENDING
    [b] = await store.create_runs([spec("b", singleton=gate)], T0)
    assert b.waiting and await status_of(store, "b") == RunStatus.BLOCKED  # behind "a"
    assert (await lease(store, "a")).holds_slot
    assert (await claim(store, "d")).parked


async def test_a_start_with_a_lease_is_created_claimed_by_it(store: Store) -> None:
    mine = Lease("starter:1", at(30))
    [started] = await store.create_runs([spec("a", quota=QuotaGate("q", 5))], T0, lease=mine)
    assert started.created and started.claim is not None
    assert started.run is not None and started.run.status == RunStatus.PENDING
    claimed = started.claim.run
    assert claimed.status == RunStatus.RUNNING and claimed.lease_owner == "starter:1"
    assert claimed.lease_expires_at == at(30) and not claimed.holds_slot
    assert list(started.claim.steps) == [] and list(started.claim.signals) == []
    stored = await run_of(store, "a")
    assert stored.status == RunStatus.RUNNING and stored.lease_owner == "starter:1"
    assert (await claim(store, "a", owner="other")).claim is None  # leased: not claimable
    await store.settle_run("a", "starter:1", Writes(), DONE, T0)
    assert await status_of(store, "a") == RunStatus.COMPLETED


async def test_a_keyed_start_with_a_lease_takes_its_slot_only_when_admitted(store: Store) -> None:
    gate = key(limit=1)
    [first] = await store.create_runs([spec("a", singleton=gate)], T0, lease=Lease("s:1", at(30)))
    assert first.claim is not None and first.claim.run.holds_slot
    assert (await run_of(store, "a")).holds_slot
    [second] = await store.create_runs(
        [spec("b", created=1, singleton=gate)], T0, lease=Lease("s:2", at(30))
    )
    assert second.created and second.waiting and second.claim is None
    assert await status_of(store, "b") == RunStatus.BLOCKED
    replacing = key(limit=1, replace=True)
    [third] = await store.create_runs(
        [spec("c", created=2, singleton=replacing)], T0, lease=Lease("s:3", at(30))
    )
    assert third.created and third.claim is None  # waits for the runs it cancelled to settle
    [again] = await store.create_runs([spec("a", singleton=gate)], T0, lease=Lease("s:4", at(30)))
    assert not again.created and again.claim is None
    # The stored run stands as it was: its lease is still the first starter's.
    assert again.run == await run_of(store, "a") and again.run.lease_owner == "s:1"


async def test_a_lease_is_offered_to_the_first_claims_specs_of_a_batch(store: Store) -> None:
    mine = Lease("s:1", at(30))
    gate = key()
    started = await store.create_runs(
        [
            spec("a"),
            spec("k1", created=1, singleton=gate),
            spec("k2", created=2, singleton=gate),  # behind k1: created waiting, not claimed
            spec("b", created=3),
            spec("c", created=4),  # past the offers
        ],
        T0,
        lease=mine,
        claims=4,
    )
    claimed = {s.run.id: s.claim is not None for s in started if s.run is not None}
    assert claimed == {"a": True, "k1": True, "k2": False, "b": True, "c": False}
    for run_id in ("a", "k1", "b"):
        run = await run_of(store, run_id)
        assert (run.status, run.lease_owner) == (RunStatus.RUNNING, "s:1")
    assert (await run_of(store, "k1")).holds_slot
    assert (await run_of(store, "k2")).status == RunStatus.BLOCKED
    assert (await run_of(store, "c")).status == RunStatus.PENDING
    # The default offers the first spec only; no offer at all with claims=0.
    first, second = await store.create_runs([spec("d"), spec("e")], T0, lease=mine)
    assert (first.claim is not None, second.claim is not None) == (True, False)
    [none] = await store.create_runs([spec("f")], T0, lease=mine, claims=0)
    assert none.claim is None and (await run_of(store, "f")).status == RunStatus.PENDING


async def test_a_lease_never_claims_a_fork_at_its_creation(store: Store) -> None:
    fork = spec("a", history=(step("a", 1),), forked_from=("x", 2))
    with pytest.raises(ValueError):
        await store.create_runs([fork], T0, lease=Lease("s:1", at(30)))
    assert await store.get_run("a") is None


async def test_replace_cancels_the_key_active_runs_leased_ones_go_to_cancelling(
    store: Store,
) -> None:
    gate = key(limit=2)
    await create(store, spec("a", singleton=gate), spec("b", singleton=gate))
    await create(store, spec("c", singleton=gate), spec("other", singleton=SingletonGate("o")))
    await lease(store, "a")
    await suspend(store, "b", at(60))
    await create(store, spec("new", created=1, singleton=key(limit=2, replace=True)), now=at(1))
    assert await status_of(store, "a") == RunStatus.CANCELLING
    assert await status_of(store, "b") == RunStatus.CANCELLED
    assert await status_of(store, "c") == RunStatus.CANCELLED
    assert await status_of(store, "other") == RunStatus.PENDING
    assert await status_of(store, "new") == RunStatus.PENDING


async def test_replace_ignores_queue_depth(store: Store) -> None:
    await create(store, spec("a", singleton=key(max_queue_depth=0)))
    gate = key(max_queue_depth=0, replace=True)
    [started] = await store.create_runs([spec("b", created=1, singleton=gate)], at(1))
    assert started.created
    assert await status_of(store, "a") == RunStatus.CANCELLED


async def test_gates_of_different_keys_never_interact(store: Store) -> None:
    await create(store, spec("a", quota=QuotaGate("q1", 1), singleton=key(max_queue_depth=0)))
    other = spec("b", quota=QuotaGate("q2", 1), singleton=SingletonGate("k2", max_queue_depth=0))
    [started] = await store.create_runs([other], T0)
    assert started.created


# ---------------------------------------------------------------- create_runs: a batch


async def test_a_batch_admits_each_spec_after_the_ones_before_it(store: Store) -> None:
    gate, quota = key(limit=1, max_queue_depth=1), QuotaGate("q", limit=2)
    outcomes = await store.create_runs(
        [
            spec("a", singleton=gate),
            spec("p"),
            spec("b", created=1, singleton=gate),
            spec("c", created=2, singleton=gate),
            spec("q1", quota=quota),
            spec("q2", quota=quota),
            spec("q3", quota=quota),
            spec("other", singleton=SingletonGate("k2", 1, max_queue_depth=0)),
        ],
        T0,
    )
    a, p, b, c, q1, q2, q3, other = outcomes
    assert a.created and not a.waiting and p.created
    assert b.created and b.waiting  # behind "a", in the batch's order
    assert isinstance(c.rejected, SingletonQueueFullError) and c.run is None
    assert q1.created and q2.created
    assert isinstance(q3.rejected, ConcurrencyLimitError) and q3.rejected.active == 2
    assert other.created and not other.waiting
    assert await store.get_run("c") is None and await store.get_run("q3") is None
    assert await status_of(store, "b") == RunStatus.BLOCKED


async def test_a_batch_lines_up_one_keys_runs_in_fifo_order(store: Store) -> None:
    gate = key(limit=1)
    specs = [spec(f"r{9 - n}", created=n, singleton=gate) for n in range(4)]
    outcomes = await store.create_runs(specs, T0)
    assert [o.waiting for o in outcomes] == [False, True, True, True]
    holder = await lease(store, "r9")
    assert holder.holds_slot
    await store.settle_run("r9", "owner-1", Writes(), DONE, at(5))
    assert (await claim(store, "r8", now=at(5))).claim is not None  # the next in the batch's order


async def test_a_repeated_id_in_a_batch_creates_its_run_once(store: Store) -> None:
    quota = QuotaGate("q", limit=5)
    outcomes = await store.create_runs(
        [
            spec("a"),
            spec("a", priority=9),
            spec("g", quota=quota),
            spec("g", quota=quota, priority=9),
            spec("a", quota=quota),
        ],
        T0,
    )
    assert [o.created for o in outcomes] == [True, False, True, False, False]
    assert all(o.run is not None and o.run.priority == 0 for o in outcomes)
    assert all(o.rejected is None for o in outcomes)


async def test_a_batch_returns_existing_ids_without_admission(store: Store) -> None:
    quota = QuotaGate("q", limit=1)
    await create(store, spec("a", quota=quota))
    again, refused, plain = await store.create_runs(
        [spec("a", quota=quota), spec("b", quota=quota), spec("c")], at(1)
    )
    assert not again.created and again.rejected is None and again.run is not None
    assert isinstance(refused.rejected, ConcurrencyLimitError)
    assert plain.created


async def test_a_batch_applies_rate_limits_and_debounce_in_order(store: Store) -> None:
    rate, fold = RateGate("r", 1, 60.0), DebounceGate("d", 5.0)
    first, refused, held, folded = await store.create_runs(
        [
            limited("a", 0, rate=rate),
            limited("b", 0, rate=rate),
            limited("c", 0, debounce=fold),
            limited("e", 0, debounce=fold),
        ],
        T0,
    )
    assert first.created and isinstance(refused.rejected, RateLimitError)
    assert held.created and held.waiting
    assert folded.debounced and folded.run is not None and folded.run.id == "c"
    assert await store.get_run("e") is None


# ---------------------------------------------------------------- rate limits and debounce


def limited(run_id: str, now: float, **fields: Any) -> RunSpec:
    """A start made at ``now`` (rate windows and debounces count from the start's instant)."""
    return spec(run_id, created=now, **fields)


async def test_a_start_over_its_rate_limit_is_refused_and_writes_nothing(store: Store) -> None:
    rate = RateGate("r", 2, 60.0, user_key="tenant")
    await create(store, limited("a", 0, rate=rate))
    await create(store, limited("b", 10, rate=rate), now=at(10))
    refused, plain = await store.create_runs([limited("c", 20, rate=rate), spec("d")], at(20))
    assert isinstance(refused.rejected, RateLimitError) and refused.run is None
    error = refused.rejected
    assert (error.workflow, error.key, error.limit, error.period) == ("wf", "tenant", 2, 60.0)
    assert error.retry_after == pytest.approx(40.0)
    assert plain.created and await store.get_run("c") is None
    [room] = await store.create_runs([limited("e", 60, rate=rate)], at(60))
    assert room.created and room.run is not None and room.run.rate_at == at(60)


async def test_a_rate_window_counts_every_run_of_its_key_whatever_its_status(
    store: Store,
) -> None:
    rate = RateGate("r", 1, 60.0)
    await create(store, limited("a", 0, rate=rate))
    await settle(store, "a")
    [refused] = await store.create_runs([limited("b", 1, rate=rate)], at(1))
    assert isinstance(refused.rejected, RateLimitError)
    [other] = await store.create_runs([limited("c", 1, rate=RateGate("other", 1, 60.0))], at(1))
    assert other.created


async def test_an_existing_id_is_returned_without_a_rate_check(store: Store) -> None:
    rate = RateGate("r", 1, 60.0)
    await create(store, limited("a", 0, rate=rate))
    [again] = await store.create_runs([limited("a", 1, rate=rate)], at(1))
    assert not again.created and again.rejected is None and again.run is not None


async def test_a_throttled_start_is_created_held_until_its_window_has_room(store: Store) -> None:
    rate = RateGate("r", 1, 10.0, delay=True)
    [first] = await store.create_runs([limited("a", 0, rate=rate)], T0)
    assert first.run is not None and first.run.status == RunStatus.PENDING
    assert (first.run.rate_at, first.run.begin_at, first.waiting) == (T0, None, False)
    [second] = await store.create_runs([limited("b", 0, rate=rate)], T0, lease=Lease("s", at(30)))
    assert second.created and second.waiting and second.claim is None  # a lease never claims it
    held = await run_of(store, "b")
    assert (held.status, held.rate_at, held.begin_at, held.wake_at) == (
        RunStatus.BLOCKED,
        at(10),
        at(10),
        at(10),
    )
    [third] = await store.create_runs([limited("c", 2, rate=rate)], at(2))
    assert third.run is not None and third.run.begin_at == at(20)
    assert (await claim(store, "b", now=at(9))).claim is None
    assert await store.due_run_ids(at(10), 10, None) == ["b"]
    assert (await lease(store, "b", now=at(10))).status == RunStatus.RUNNING


async def test_a_held_runs_execution_timeout_counts_from_its_beginning(store: Store) -> None:
    rate = RateGate("r", 1, 10.0, delay=True)
    await create(store, limited("a", 0, rate=rate, deadline_at=at(30)))
    await create(store, limited("b", 0, rate=rate, deadline_at=at(30)))
    assert [(await run_of(store, r)).deadline_at for r in "ab"] == [at(30), at(40)]
    assert await store.timed_out_run_ids(at(35), 10, None) == ["a"]


async def test_a_debounced_start_folds_into_its_keys_held_run(store: Store) -> None:
    debounce = DebounceGate("d", 5.0, 12.0)
    [first] = await store.create_runs([limited("a", 0, debounce=debounce)], T0)
    assert first.created and first.waiting
    assert first.run is not None and first.run.begin_at == at(5)
    for run_id, second, begin in (("b", 3, 8), ("c", 7, 12), ("d", 11, 12)):
        [folded] = await store.create_runs([limited(run_id, second, debounce=debounce)], at(second))
        assert folded.debounced and not folded.created and folded.run is not None
        assert (folded.run.id, folded.run.input, folded.run.begin_at) == (
            "a",
            {"id": run_id},
            at(begin),
        )
        assert folded.run.wake_at == at(begin) and await store.get_run(run_id) is None
    [other] = await store.create_runs([limited("x", 11, debounce=DebounceGate("e", 5.0))], at(11))
    assert other.created
    [after] = await store.create_runs([limited("e", 12, debounce=debounce)], at(12))  # "a" began
    assert after.created and after.run is not None and after.run.begin_at == at(17)
    assert (await run_of(store, "a")).input == {"id": "d"}


async def test_a_start_that_folds_adds_no_run_so_no_gate_refuses_it(store: Store) -> None:
    gates: dict[str, Any] = {
        "debounce": DebounceGate("d", 5.0),
        "quota": QuotaGate("q", 1),
        "rate": RateGate("r", 1, 60.0),
    }
    await create(store, limited("a", 0, **gates))
    [folded] = await store.create_runs([limited("b", 1, **gates)], at(1))
    assert folded.debounced and folded.rejected is None
    [refused] = await store.create_runs([limited("c", 1, **{**gates, "debounce": None})], at(1))
    assert isinstance(refused.rejected, RateLimitError)  # the rate limit is checked first


async def test_a_held_run_is_no_singleton_waiter_until_it_begins(store: Store) -> None:
    gate = key(limit=1)
    await create(store, spec("holder", singleton=gate))
    await lease(store, "holder")
    debounce = DebounceGate("d", 100.0)
    await create(store, limited("held", 1, singleton=gate, debounce=debounce), now=at(1))
    await create(store, spec("waiter", created=2, singleton=gate), now=at(2))
    result = await store.settle_run(
        "holder", "owner-1", Writes(), DONE, at(10), successor=Lease("heir", at(40))
    )
    assert result.successor is not None and result.successor.run.id == "waiter"
    assert (await run_of(store, "held")).wake_at == at(101)  # neither woken nor handed the slot
    await store.settle_run("waiter", "heir", Writes(), DONE, at(20))
    assert (await claim(store, "held", now=at(101))).claim is not None


async def test_a_held_run_is_never_ahead_of_a_waiter_at_its_claim(store: Store) -> None:
    gate = key(limit=1)
    debounce = DebounceGate("d", 100.0)
    await create(store, limited("held", 1, singleton=gate, debounce=debounce), now=at(1))
    await create(store, spec("waiter", created=2, singleton=gate), now=at(2))
    await create(store, spec("holder", singleton=gate))
    assert await settle(store, "holder", now=at(10)) == ["waiter"]
    assert (await claim(store, "waiter", now=at(10))).claim is not None


async def test_limited_runs_are_the_starts_inside_their_windows_and_the_unbegun_debounces(
    store: Store,
) -> None:
    rate = RateGate("r", 2, 10.0, delay=True)
    await create(store, limited("a", 0, rate=rate))
    await settle(store, "a", now=at(1))  # a settled start still counts in its window
    await create(store, limited("b", 2, rate=rate), now=at(2))
    await create(store, limited("c", 3, rate=rate), now=at(3))  # throttled: counted at 10
    debounce = DebounceGate("d", 5.0)
    await create(store, limited("deb", 4, debounce=debounce), now=at(4))
    await create(store, limited("both", 4, debounce=DebounceGate("e", 5.0), rate=rate), now=at(4))
    await create(store, spec("plain", created=4), now=at(4))
    found = await store.limited_runs(at(5))
    assert [r.id for r in found] == ["a", "b", "c", "both", "deb"]
    by_id = {r.id: r for r in found}
    assert (by_id["a"].rate_limit, by_id["a"].rate_at, by_id["a"].rate_until) == (2, T0, at(10))
    assert (by_id["c"].rate_at, by_id["c"].rate_until, by_id["c"].begin_at) == (
        at(10),
        at(20),
        at(10),
    )
    assert (by_id["deb"].debounce_key, by_id["deb"].begin_at) == ("d", at(9))
    # "a" left its window at 10; "deb" began at 9 (still blocked, but no longer held).
    assert [r.id for r in await store.limited_runs(at(10))] == ["b", "c", "both"]
    # "both" (counted at 12, when the window had room, until 22) stays for its window.
    assert [r.id for r in await store.limited_runs(at(20))] == ["both"]
    assert await store.limited_runs(at(22)) == []


async def holder_and_waiter(store: Store, waiter: str) -> None:
    """``holder`` leased with the one slot of its key, ``waiter`` created behind it."""
    gate = key(limit=1)
    await create(store, spec("holder", singleton=gate), spec(waiter, created=1, singleton=gate))
    await lease(store, "holder")


async def test_a_release_stamps_the_waiters_it_wakes_and_the_claim_admitting_one_reads_it(
    store: Store,
) -> None:
    await holder_and_waiter(store, "waiter")
    assert (await claim(store, "waiter", now=at(1))).parked
    assert (await run_of(store, "waiter")).handoff_at is None  # a denial stamps nothing
    result = await store.settle_run("holder", "owner-1", Writes(), DONE, at(10))
    assert result.woken == ["waiter"]
    assert (await run_of(store, "waiter")).handoff_at == at(10)
    outcome = await claim(store, "waiter", owner="elsewhere", now=at(12))
    assert outcome.claim is not None and outcome.handed_off_at == at(10)
    assert outcome.claim.run.handoff_at is None
    assert (await run_of(store, "waiter")).handoff_at is None  # read once: the claim cleared it


async def test_a_successor_leased_by_the_release_and_a_plain_claim_carry_no_hand_off_stamp(
    store: Store,
) -> None:
    await holder_and_waiter(store, "heir")
    result = await store.settle_run(
        "holder", "owner-1", Writes(), DONE, at(10), successor=Lease("heir-owner", at(40))
    )
    assert result.successor is not None and result.successor.run.handoff_at is None
    await create(store, spec("free"))
    assert (await claim(store, "free")).handed_off_at is None


# ---------------------------------------------------------------- claim queues


async def test_pending_ids_are_highest_priority_first_then_oldest_then_by_id(
    store: Store,
) -> None:
    await create(
        store,
        spec("late", created=2),
        spec("b", created=1),
        spec("a", created=1),
        spec("urgent", created=3, priority=5),
    )
    await create(store, spec("taken", created=0))
    await lease(store, "taken")
    assert await store.pending_run_ids(at(9), 10, None) == ["urgent", "a", "b", "late"]
    assert await store.pending_run_ids(at(9), 2, None) == ["urgent", "a"]


async def test_pending_ids_are_scoped_to_the_namespace_unless_none(store: Store) -> None:
    await create(store, spec("a", namespace="n1"), spec("b", namespace="n2"), spec("c"))
    assert await store.pending_run_ids(T0, 10, "n1") == ["a"]
    assert await store.pending_run_ids(T0, 10, None) == ["a", "b", "c"]


async def test_due_ids_are_waiting_runs_whose_wake_time_came_most_overdue_first(
    store: Store,
) -> None:
    await create(store, *(spec(i) for i in ("soon", "late", "future", "never", "pend")))
    await suspend(store, "late", at(5))
    await suspend(store, "soon", at(2))
    await suspend(store, "future", at(100))
    await suspend(store, "never", None)
    assert await store.due_run_ids(at(5), 10, None) == ["soon", "late"]
    assert await store.due_run_ids(at(5), 1, None) == ["soon"]
    assert await store.due_run_ids(at(1), 10, None) == []


async def test_due_ids_are_scoped_to_the_namespace(store: Store) -> None:
    await create(store, spec("a", namespace="n1"), spec("b", namespace="n2"))
    await suspend(store, "a", T0)
    await suspend(store, "b", T0)
    assert await store.due_run_ids(T0, 10, "n2") == ["b"]


async def test_expired_ids_are_leased_runs_whose_lease_ran_out(store: Store) -> None:
    await create(store, spec("a"), spec("b"), spec("c"))
    await lease(store, "a", now=at(1))
    await lease(store, "b", now=T0)
    await lease(store, "c", now=at(100))
    await store.cancel_run("a", at(2), None)
    assert await store.expired_run_ids(T0 + LEASE, 10, None) == ["b"]
    assert await store.expired_run_ids(at(31), 10, None) == ["b", "a"]
    assert await store.expired_run_ids(at(31), 1, None) == ["b"]


async def test_timed_out_ids_are_active_runs_past_their_deadline(store: Store) -> None:
    await create(
        store,
        spec("a", deadline_at=at(10)),
        spec("b", deadline_at=at(5)),
        spec("c", deadline_at=at(50)),
        spec("done", deadline_at=at(1)),
        spec("free"),
    )
    await settle(store, "done")
    assert await store.timed_out_run_ids(at(10), 10, None) == ["b", "a"]
    assert await store.timed_out_run_ids(at(10), 1, None) == ["b"]


# ---------------------------------------------------------------- claim_run


async def test_claim_of_a_pending_run_leases_it_with_its_steps_and_signals(
    store: Store,
) -> None:
    await create(store, spec("a"))
    await store.deliver_signal("a", "first", 1, T0)
    await store.deliver_signal("a", "second", 2, at(1))
    outcome = await claim(store, "a", now=at(2))
    assert outcome.claim is not None and not outcome.parked and outcome.settled is None
    run = outcome.claim.run
    assert run.status == RunStatus.RUNNING and run.lease_owner == "owner-1"
    assert run.lease_expires_at == at(2) + LEASE
    assert [s.name for s in outcome.claim.signals] == ["first", "second"]
    assert [s.payload for s in outcome.claim.signals] == [1, 2]
    assert outcome.claim.steps == []
    assert await run_of(store, "a") == run


async def test_claim_returns_step_records_by_seq(store: Store) -> None:
    await create(store, spec("a"))
    await lease(store, "a")
    writes = Writes(steps=[step("a", 2, output="two"), step("a", 1, output="one")])
    await store.suspend_run("a", "owner-1", writes, T0, T0)
    outcome = await claim(store, "a")
    assert outcome.claim is not None
    assert [(s.seq, s.output) for s in outcome.claim.steps] == [(1, "one"), (2, "two")]


async def test_claim_of_an_unclaimable_run_is_empty_and_writes_nothing(store: Store) -> None:
    await create(store, spec("live"), spec("sleeping"), spec("idle"), spec("done"))
    await lease(store, "live")
    await suspend(store, "sleeping", at(60))
    await suspend(store, "idle", None)
    await settle(store, "done")
    before = await store.get_runs(["live", "sleeping", "idle", "done"])
    for run_id in ("live", "sleeping", "idle", "done", "unknown"):
        assert await claim(store, run_id, owner="thief", now=at(1)) == ClaimOutcome()
    assert await store.get_runs(["live", "sleeping", "idle", "done"]) == before


async def test_claim_of_a_due_suspended_run_clears_its_wake_fields(store: Store) -> None:
    await create(store, spec("a"))
    await suspend(store, "a", at(5))
    run = await lease(store, "a", now=at(5))
    assert run.status == RunStatus.RUNNING
    assert run.wake_at is None and run.wake_requested_at is None


async def test_claim_of_an_expired_lease_is_a_recovery(store: Store) -> None:
    await create(store, spec("a"))
    await lease(store, "a", owner="first")
    recovered = await lease(store, "a", owner="second", now=T0 + LEASE)
    assert recovered.recoveries == 1 and recovered.lease_owner == "second"
    with pytest.raises(LeaseLostError):
        await store.checkpoint("a", "first", Writes(), T0 + LEASE)


async def test_a_recovered_cancelling_run_settles_cancelled_keeping_its_error(
    store: Store,
) -> None:
    await create(store, spec("a"))
    await lease(store, "a")
    await store.cancel_run("a", T0, {"type": "Cancelled", "message": "by hand"})
    outcome = await claim(store, "a", owner="second", now=T0 + LEASE)
    assert outcome.claim is None and outcome.settled is not None
    assert outcome.settled.status == RunStatus.CANCELLED
    assert outcome.settled.error == {"type": "Cancelled", "message": "by hand"}
    assert await run_of(store, "a") == outcome.settled


async def test_a_recovery_beyond_max_recoveries_settles_the_run_dead(store: Store) -> None:
    await create(store, spec("a"))
    await lease(store, "a")
    once = await claim(store, "a", now=T0 + LEASE, max_recoveries=1)
    assert once.claim is not None and once.claim.run.recoveries == 1
    twice = await claim(store, "a", now=T0 + 2 * LEASE, max_recoveries=1)
    assert twice.claim is None and twice.settled is not None
    assert twice.settled.status == RunStatus.DEAD and twice.settled.recoveries == 2
    assert twice.settled.error is not None
    assert twice.settled.error["type"] == "RecoveryLimitExceeded"
    assert twice.settled.lease_owner is None


async def test_renew_leases_extends_only_for_the_current_owners(store: Store) -> None:
    await create(store, spec("a"), spec("b"))
    await lease(store, "a")
    await lease(store, "b")
    assert await store.renew_leases({"a": "owner-1", "b": "owner-1"}, at(100)) == {"a", "b"}
    assert (await run_of(store, "a")).lease_expires_at == at(100)
    kept = await store.renew_leases({"a": "thief", "b": "owner-1", "unknown": "owner-1"}, at(200))
    assert kept == {"b"}
    assert (await run_of(store, "a")).lease_expires_at == at(100)
    assert (await run_of(store, "b")).lease_expires_at == at(200)
    assert await store.renew_leases({}, at(300)) == set()


async def test_renew_leases_skips_a_run_no_longer_leased(store: Store) -> None:
    await create(store, spec("a"))
    await suspend(store, "a", None)
    assert await store.renew_leases({"a": "owner-1"}, at(100)) == set()


async def test_a_handoff_claims_a_waiting_run_whatever_its_wake_time(store: Store) -> None:
    await create(store, spec("later"), spec("asleep"))
    await suspend(store, "later", at(100))
    await suspend(store, "asleep", None)
    for run_id in ("later", "asleep"):
        assert await claim(store, run_id, now=at(1)) == ClaimOutcome()
        run = await lease(store, run_id, now=at(1), handoff=True)
        assert run.status == RunStatus.RUNNING and run.lease_expires_at == at(1) + LEASE
        assert run.wake_at is None and run.wake_requested_at is None


async def test_a_handoff_does_not_claim_a_live_lease_or_a_finished_run(store: Store) -> None:
    await create(store, spec("live"), spec("done"))
    await lease(store, "live")
    await settle(store, "done")
    before = await store.get_runs(["live", "done"])
    for run_id in ("live", "done", "unknown"):
        assert await claim(store, run_id, owner="thief", now=at(1), handoff=True) == ClaimOutcome()
    assert await store.get_runs(["live", "done"]) == before


# ---------------------------------------------------------------- park_full_waiters


async def test_park_full_waiters_denies_the_due_waiters_of_full_keys_in_one_write(
    store: Store,
) -> None:
    full, roomy = key(), SingletonGate("roomy", 2, retry=0.0)
    await create(
        store,
        spec("h", singleton=full),
        spec("w1", created=1, singleton=full),
        spec("w2", created=2, singleton=full),
        spec("rh", singleton=roomy),
        spec("rw", created=1, singleton=roomy),
        spec("rw2", created=2, singleton=roomy),
        spec("plain"),
    )
    await lease(store, "h")
    await lease(store, "rh")  # one of two slots held: "rw2" waits behind "rw", not a full key
    timer = RetryTimer(5.0, 60.0)
    timers = {run_id: timer for run_id in ("w1", "w2", "rw2", "rw", "plain", "h", "missing")}
    before = await store.get_runs(["rw2", "rw", "plain", "h"])
    assert sorted(await store.park_full_waiters(timers, at(3))) == ["w1", "w2"]
    w1 = await run_of(store, "w1")  # denied a second time (its start counted the first)
    assert w1.status == RunStatus.BLOCKED and w1.admission_retries == 2
    assert w1.wake_at == at(3) + timedelta(seconds=10) and w1.lease_owner is None
    assert await store.get_runs(["rw2", "rw", "plain", "h"]) == before  # left to their claims
    assert await store.park_full_waiters(timers, at(4)) == []  # none due now
    # The holder's release wakes the oldest waiter: the key is no longer full, nor is it parked.
    await store.settle_run("h", "owner-1", Writes(), DONE, at(20))
    assert await store.park_full_waiters(timers, at(20)) == []
    assert (await lease(store, "w1", now=at(20))).holds_slot
    assert (await claim(store, "w2", now=at(40))).parked


# ---------------------------------------------------------------- hand_off_due_runs


async def test_hand_off_holds_due_runs_until_hold_until_most_overdue_first(store: Store) -> None:
    await create(store, spec("a"), spec("b"), spec("future"), spec("asleep"), spec("idle"))
    await suspend(store, "a", at(5))
    await suspend(store, "b", at(2))
    await suspend(store, "future", at(50))
    await suspend(store, "asleep", None)
    untouched = await store.get_runs(["future", "asleep", "idle"])
    taken = await store.hand_off_due_runs(at(10), 10, None, at(40))
    assert [run.id for run in taken] == ["b", "a"]
    assert all(r.status == RunStatus.SUSPENDED and r.wake_at == at(40) for r in taken)
    assert taken == [await run_of(store, "b"), await run_of(store, "a")]
    assert await store.get_runs(["future", "asleep", "idle"]) == untouched


async def test_hand_off_takes_at_most_limit_runs_of_the_namespace(store: Store) -> None:
    await create(store, *(spec(i, namespace="x") for i in "abc"), spec("y", namespace="y"))
    for n, run_id in enumerate("abcy"):
        await suspend(store, run_id, at(n))
    assert [r.id for r in await store.hand_off_due_runs(at(10), 2, "x", at(40))] == ["a", "b"]
    assert (await run_of(store, "c")).wake_at == at(2)
    assert (await run_of(store, "y")).wake_at == at(3)
    assert [r.id for r in await store.hand_off_due_runs(at(10), 10, None, at(40))] == ["c", "y"]


async def test_a_second_hand_off_right_after_finds_nothing_until_hold_until(store: Store) -> None:
    await create(store, spec("a"))
    await suspend(store, "a", at(5))
    assert [r.id for r in await store.hand_off_due_runs(at(10), 10, None, at(40))] == ["a"]
    assert await store.hand_off_due_runs(at(10), 10, None, at(40)) == []
    assert await store.due_run_ids(at(39), 10, None) == []
    assert [r.id for r in await store.hand_off_due_runs(at(40), 10, None, at(70))] == ["a"]


# ---------------------------------------------------------------- remote step results


async def test_a_successful_result_completes_the_record_and_wakes_the_run(store: Store) -> None:
    record = remote("a", wake_at=at(60))
    await dispatched(store, "a", record)
    assert await store.record_step_result("a", 1, 1, True, {"v": 1}, None, at(3)) == "recorded"
    completed = replace(
        record, status=StepStatus.COMPLETED, output={"v": 1}, finished_at=at(3), wake_at=None
    )
    assert await store.list_steps("a") == [completed]
    run = await run_of(store, "a")
    assert (run.status, run.wake_at) == (RunStatus.SUSPENDED, at(3))


async def test_a_failed_attempt_returns_the_record_to_pending_with_its_error(
    store: Store,
) -> None:
    record = remote("a", attempt=2, wake_at=at(60))
    await dispatched(store, "a", record)
    error: dict[str, object] = {"type": "Boom", "message": "no"}
    assert await store.record_step_result("a", 1, 2, False, "ignored", error, at(3)) == "recorded"
    pending = replace(
        record, status=StepStatus.PENDING, error=error, finished_at=at(3), wake_at=None
    )
    assert await store.list_steps("a") == [pending]
    assert (await run_of(store, "a")).wake_at == at(3)


async def test_a_result_during_a_turn_stamps_a_wake_request(store: Store) -> None:
    await dispatched(store, "a")
    await lease(store, "a", now=at(1), handoff=True)
    assert await store.record_step_result("a", 1, 1, True, 7, None, at(3)) == "recorded"
    run = await run_of(store, "a")
    assert (run.status, run.wake_at, run.wake_requested_at) == (RunStatus.RUNNING, None, at(3))
    assert await store.suspend_run("a", "owner-1", Writes(), None, at(4)) is True


async def test_a_duplicate_result_writes_nothing_but_wakes_the_suspended_run(
    store: Store,
) -> None:
    await dispatched(store, "a")
    assert await store.record_step_result("a", 1, 1, True, "first", None, at(3)) == "recorded"
    await lease(store, "a", now=at(3))
    await store.suspend_run("a", "owner-1", Writes(), None, at(4))
    steps = await store.list_steps("a")
    assert await store.record_step_result("a", 1, 1, False, None, {"x": 1}, at(5)) == "duplicate"
    assert await store.list_steps("a") == steps
    run = await run_of(store, "a")
    assert (run.status, run.wake_at, run.updated_at) == (RunStatus.SUSPENDED, at(5), at(5))


async def test_a_result_for_a_record_left_pending_is_a_duplicate(store: Store) -> None:
    await dispatched(store, "a", remote("a", attempt=2))
    assert await store.record_step_result("a", 1, 2, False, None, {"x": 1}, at(3)) == "recorded"
    steps = await store.list_steps("a")
    assert await store.record_step_result("a", 1, 2, True, "late", None, at(4)) == "duplicate"
    assert await store.list_steps("a") == steps


async def test_results_for_unknown_or_finished_runs_missing_records_or_stale_attempts_drop(
    store: Store,
) -> None:
    await dispatched(store, "a", remote("a", attempt=2))
    await create(store, spec("done"))
    await lease(store, "done")
    await store.settle_run("done", "owner-1", Writes(steps=[remote("done")]), DONE, T0)
    before = await store.get_runs(["a", "done"])
    steps = {run_id: await store.list_steps(run_id) for run_id in ("a", "done")}
    for run_id, seq, attempt in (("unknown", 1, 1), ("done", 1, 1), ("a", 9, 2), ("a", 1, 1)):
        verdict = await store.record_step_result(run_id, seq, attempt, True, 1, None, at(3))
        assert verdict == "dropped", (run_id, seq, attempt)
    assert await store.get_runs(["a", "done"]) == before
    assert {run_id: await store.list_steps(run_id) for run_id in ("a", "done")} == steps


async def test_a_heartbeat_stamps_only_the_running_record_of_that_attempt(store: Store) -> None:
    await dispatched(store, "a", remote("a", 1, attempt=2), step("a", 2))
    assert await store.record_heartbeat("a", 1, 2, at(4)) is True
    assert (await store.get_step("a", 1)) == remote("a", 1, attempt=2, last_heartbeat_at=at(4))
    steps = await store.list_steps("a")
    for seq, attempt in ((1, 1), (1, 3), (2, 0), (9, 2)):
        assert await store.record_heartbeat("a", seq, attempt, at(5)) is False, (seq, attempt)
    assert await store.record_heartbeat("unknown", 1, 2, at(5)) is False
    assert await store.list_steps("a") == steps


async def test_a_heartbeat_for_a_finished_run_is_refused(store: Store) -> None:
    await create(store, spec("done"))
    await lease(store, "done")
    await store.settle_run("done", "owner-1", Writes(steps=[remote("done")]), DONE, T0)
    assert await store.record_heartbeat("done", 1, 1, at(4)) is False
    assert await store.list_steps("done") == [remote("done")]


# ---------------------------------------------------------------- remote workflow turns


async def awaiting(store: Store, run_id: str, task_id: str = "t1", deadline: float = 60) -> Run:
    """Create the run and send a turn of it: suspended until ``deadline``, awaiting ``task_id``."""
    await create(store, spec(run_id))
    await lease(store, run_id)
    await store.await_decision(run_id, "owner-1", task_id, at(deadline), T0)
    return await run_of(store, run_id)


async def test_a_turn_sent_out_suspends_the_run_marked_with_its_task_until_the_deadline(
    store: Store,
) -> None:
    run = await awaiting(store, "a", "t1", deadline=60)
    assert run.status == RunStatus.SUSPENDED and run.awaiting_decision_task_id == "t1"
    assert run.wake_at == at(60) and run.lease_owner is None
    assert await store.due_run_ids(at(59), 10, None) == []
    assert await store.due_run_ids(at(60), 10, None) == ["a"]


async def test_awaiting_a_decision_is_fenced(store: Store) -> None:
    await create(store, spec("a"))
    await lease(store, "a")
    with pytest.raises(LeaseLostError):
        await store.await_decision("a", "someone-else", "t1", at(60), T0)
    await store.cancel_run("a", T0, None)
    with pytest.raises(RunCancelling):
        await store.await_decision("a", "owner-1", "t1", at(60), T0)


async def test_only_the_awaited_task_claims_the_run_and_only_once(store: Store) -> None:
    await awaiting(store, "a", "t1")
    await store.record_heartbeat("a", 1, 1, T0)
    assert await store.claim_decision("a", "t0", "owner-2", at(1), at(31)) is None
    claim = await store.claim_decision("a", "t1", "owner-2", at(1), at(31))
    assert claim is not None
    assert claim.run.status == RunStatus.RUNNING and claim.run.lease_owner == "owner-2"
    assert claim.run.awaiting_decision_task_id is None and claim.run.wake_at is None
    assert await store.claim_decision("a", "t1", "owner-3", at(2), at(32)) is None
    assert (await run_of(store, "a")).lease_owner == "owner-2"


async def test_a_decision_for_a_cancelled_or_unknown_run_claims_nothing(store: Store) -> None:
    await awaiting(store, "a", "t1")
    await store.cancel_run("a", at(1), None)
    assert await store.claim_decision("a", "t1", "owner-2", at(2), at(32)) is None
    assert await store.claim_decision("nope", "t1", "owner-2", at(2), at(32)) is None
    assert await status_of(store, "a") == RunStatus.CANCELLED


async def test_a_wake_while_a_turn_is_out_leaves_the_run_alone_and_rewakes_after_apply(
    store: Store,
) -> None:
    await awaiting(store, "a", "t1", deadline=60)
    assert await store.deliver_signal("a", "go", {"x": 1}, at(1)) is False
    run = await run_of(store, "a")
    assert run.wake_at == at(60) and run.wake_requested_at is not None
    assert await store.due_run_ids(at(2), 10, None) == []
    claim = await store.claim_decision("a", "t1", "owner-2", at(3), at(33))
    assert claim is not None and [s.name for s in claim.signals] == ["go"]
    assert await store.suspend_run("a", "owner-2", Writes(), at(100), at(4)) is True
    assert (await run_of(store, "a")).wake_at == at(4)


async def test_a_beat_pushes_the_deadline_forward_only_while_the_turn_is_awaited(
    store: Store,
) -> None:
    await awaiting(store, "a", "t1", deadline=60)
    assert await store.extend_decision("a", "t1", at(90)) is True
    assert (await run_of(store, "a")).wake_at == at(90)
    assert await store.extend_decision("a", "t1", at(70)) is True
    assert (await run_of(store, "a")).wake_at == at(90)
    assert await store.extend_decision("a", "t0", at(120)) is False
    assert await store.claim_decision("a", "t1", "owner-2", at(1), at(31)) is not None
    assert await store.extend_decision("a", "t1", at(120)) is False
    assert (await run_of(store, "a")).wake_at is None


async def test_a_turn_sent_again_supersedes_the_one_out(store: Store) -> None:
    await awaiting(store, "a", "t1", deadline=60)
    await lease(store, "a", owner="owner-2", now=at(60))
    await store.await_decision("a", "owner-2", "t2", at(120), at(60))
    assert await store.claim_decision("a", "t1", "owner-3", at(61), at(91)) is None
    assert await store.claim_decision("a", "t2", "owner-3", at(61), at(91)) is not None


# ---------------------------------------------------------------- singleton admission


async def test_singleton_admits_up_to_the_limit_and_parks_the_rest_until_retry(
    store: Store,
) -> None:
    gate = key(limit=2, retry=RETRY.total_seconds())
    await create(store, *(spec(i, created=n, singleton=gate) for n, i in enumerate("abc")))
    assert (await lease(store, "a")).holds_slot
    assert (await lease(store, "b")).holds_slot
    # c was counted behind a full key: created parked, its fallback timer from its creation.
    c = await run_of(store, "c")
    assert c.status == RunStatus.BLOCKED and c.wake_at == T0 + RETRY
    assert await store.due_run_ids(T0 + RETRY / 2, 10, None) == []
    parked = await claim(store, "c", now=T0 + RETRY)
    assert parked == ClaimOutcome(parked=True)
    c = await run_of(store, "c")  # a second denial in a row: the timer doubles
    assert c.status == RunStatus.BLOCKED and c.wake_at == T0 + 3 * RETRY
    assert not c.holds_slot and c.lease_owner is None and c.admission_retries == 2
    assert await store.due_run_ids(T0 + 3 * RETRY, 10, None) == ["c"]


async def test_a_waiter_denied_again_and_again_backs_off_up_to_the_most(store: Store) -> None:
    await create(
        store, spec("a", created=0, singleton=key()), spec("b", created=1, singleton=key())
    )
    await lease(store, "a")
    timer = RetryTimer(first=1.0, most=5.0, jitter=1.0)
    now, delays = at(1), []
    for _ in range(5):
        outcome = await store.claim_run("b", "owner-2", now, now + LEASE, singleton_retry=timer)
        assert outcome.parked
        b = await run_of(store, "b")
        assert b.status == RunStatus.BLOCKED and b.wake_at is not None
        delays.append((b.wake_at - now).total_seconds())
        now = b.wake_at
    assert delays == [2.0, 4.0, 5.0, 5.0, 5.0]  # the start behind "a" counted the first
    assert (await run_of(store, "b")).admission_retries == 6
    # Admitted at last, it starts from the first delay again if it ever waits again.
    await store.settle_run("a", "owner-1", Writes(), DONE, now)
    admitted = await claim(store, "b", owner="owner-2", now=now)
    assert admitted.claim is not None and admitted.claim.run.holds_slot
    assert admitted.claim.run.admission_retries == 0


async def test_a_waiters_retry_timer_is_jittered_by_the_engines_draw(store: Store) -> None:
    await create(
        store, spec("a", created=0, singleton=key()), spec("b", created=1, singleton=key())
    )
    await lease(store, "a")
    timer = RetryTimer(first=1.0, most=30.0, jitter=1.2)
    await store.claim_run("b", "owner-2", at(1), at(1) + LEASE, singleton_retry=timer)
    b = await run_of(store, "b")
    # The second denial (the start counted the first): 1 s doubled, times the engine's draw.
    assert b.wake_at is not None and (b.wake_at - at(1)).total_seconds() == pytest.approx(2.4)


async def test_singleton_admission_is_fifo_even_when_claimed_out_of_order(
    store: Store,
) -> None:
    await create(
        store, spec("old", created=0, singleton=key()), spec("new", created=1, singleton=key())
    )
    assert (await claim(store, "new")).parked
    assert (await lease(store, "old")).holds_slot


async def test_same_timestamp_ties_with_limit_two_admit_the_two_smallest_ids(
    store: Store,
) -> None:
    gate = key(limit=2)
    await create(store, *(spec(i, singleton=gate) for i in ("c", "b", "a")))
    assert (await claim(store, "c")).parked
    assert (await lease(store, "b")).holds_slot
    assert (await lease(store, "a")).holds_slot
    assert (await claim(store, "c", now=RETRY + T0)).parked


async def test_a_later_run_with_a_smaller_id_never_displaces_a_holder(store: Store) -> None:
    await create(store, spec("z", created=0, singleton=key()))
    await lease(store, "z")
    await create(store, spec("a", created=1, singleton=key()), now=at(1))
    assert (await claim(store, "a", now=at(1))).parked
    await store.suspend_run("z", "owner-1", Writes(), None, at(2))
    assert (await claim(store, "a", now=at(1) + 2 * RETRY)).parked
    assert (await run_of(store, "z")).holds_slot


async def test_a_slot_is_held_across_suspension_and_lease_expiry(store: Store) -> None:
    await create(store, spec("holder", singleton=key()), spec("waiter", created=1, singleton=key()))
    await suspend(store, "holder", at(10))
    assert (await run_of(store, "holder")).holds_slot
    assert (await claim(store, "waiter", now=at(1))).parked
    await lease(store, "holder", now=at(10))
    recovered = await lease(store, "holder", owner="other", now=at(10) + LEASE)
    assert recovered.holds_slot and recovered.recoveries == 1
    assert (await claim(store, "waiter", now=at(10) + LEASE)).parked


async def test_a_cancelling_holder_keeps_its_slot_until_it_settles(store: Store) -> None:
    await create(store, spec("a", singleton=key()), spec("b", created=1, singleton=key()))
    await lease(store, "a")
    await store.cancel_run("a", T0, None)
    assert (await claim(store, "b")).parked
    woken = (
        await store.settle_run("a", "owner-1", Writes(), Settlement(RunStatus.CANCELLED), at(1))
    ).woken
    assert woken == ["b"]
    assert (await lease(store, "b", now=at(1))).holds_slot


async def test_a_settlement_hands_the_freed_slot_to_the_oldest_waiter_leased_to_the_successor(
    store: Store,
) -> None:
    await create(
        store,
        spec("holder", singleton=key()),
        spec("next", created=1, singleton=key()),
        spec("later", created=2, singleton=key()),
    )
    await lease(store, "holder")
    assert (await claim(store, "later", now=at(1))).parked
    await store.deliver_signal("next", "go", "payload", at(1))
    result = await store.settle_run(
        "holder", "owner-1", Writes(), DONE, at(2), successor=Lease("heir", at(32))
    )
    assert result.successor is not None and result.woken == []
    heir = result.successor.run
    assert (heir.id, heir.status, heir.holds_slot) == ("next", RunStatus.RUNNING, True)
    assert (heir.lease_owner, heir.lease_expires_at) == ("heir", at(32))
    assert [s.payload for s in result.successor.signals] == ["payload"]
    assert await run_of(store, "next") == heir
    assert not (await run_of(store, "later")).holds_slot
    await store.checkpoint("next", "heir", Writes(steps=[step("next", 1)]), at(3))
    last = await store.settle_run(
        "next", "heir", Writes(), DONE, at(4), successor=Lease("h2", at(34))
    )
    assert last.successor is not None and last.successor.run.id == "later"
    assert (last.successor.steps, last.successor.signals) == ([], [])


async def test_no_successor_without_a_freed_slot_or_when_none_is_asked(store: Store) -> None:
    await create(
        store, spec("plain"), spec("h", singleton=key()), spec("w", created=1, singleton=key())
    )
    await lease(store, "plain")
    plain = await store.settle_run(
        "plain", "owner-1", Writes(), DONE, T0, successor=Lease("x", at(30))
    )
    assert plain.successor is None
    await lease(store, "h")
    result = await store.settle_run("h", "owner-1", Writes(), DONE, at(1))
    assert result.successor is None and result.woken == ["w"]
    w = await run_of(store, "w")
    assert w.status == RunStatus.BLOCKED and w.wake_at == at(1)


# ---------------------------------------------------------------- fenced turn writes


async def test_turn_writes_from_a_stale_owner_raise_lease_lost_and_write_nothing(
    store: Store,
) -> None:
    await create(store, spec("a"))
    await lease(store, "a", owner="first")
    await lease(store, "a", owner="second", now=T0 + LEASE)
    before = await run_of(store, "a")
    writes = Writes(steps=[step("a", 1)], children=[spec("child", parent_id="a")])
    with pytest.raises(LeaseLostError):
        await store.checkpoint("a", "first", writes, at(31))
    with pytest.raises(LeaseLostError):
        await store.suspend_run("a", "first", writes, None, at(31))
    with pytest.raises(LeaseLostError):
        await store.settle_run("a", "first", writes, DONE, at(31))
    assert await run_of(store, "a") == before
    assert await store.list_steps("a") == []
    assert await store.get_run("child") is None


async def test_turn_writes_without_a_lease_raise_lease_lost(store: Store) -> None:
    await create(store, spec("a"))
    with pytest.raises(LeaseLostError):
        await store.checkpoint("a", "owner-1", Writes(), T0)
    with pytest.raises(LeaseLostError):
        await store.settle_run("unknown", "owner-1", Writes(), DONE, T0)


async def test_checkpoint_and_suspend_raise_run_cancelling_once_cancelled(
    store: Store,
) -> None:
    await create(store, spec("a"))
    await lease(store, "a")
    assert (await store.cancel_run("a", T0, None)).changed == ["a"]
    writes = Writes(steps=[step("a", 1)])
    with pytest.raises(RunCancelling):
        await store.checkpoint("a", "owner-1", writes, T0)
    with pytest.raises(RunCancelling):
        await store.suspend_run("a", "owner-1", writes, None, T0)
    assert await store.list_steps("a") == []
    assert await status_of(store, "a") == RunStatus.CANCELLING


async def test_concurrent_checkpoints_fence_each_run_on_its_own(store: Store) -> None:
    # Stores may commit concurrent checkpoints together; each run's fence still holds alone.
    runs = ["first", "held", "taken", "cancelled", "also-held"]
    await create(store, *(spec(r) for r in runs))
    for r in runs:
        await lease(store, r)
    await lease(store, "taken", owner="owner-2", now=T0 + LEASE)
    await store.cancel_run("cancelled", T0, None)
    outcomes = await asyncio.gather(
        *(store.checkpoint(r, "owner-1", Writes(steps=[step(r, 1)]), at(1)) for r in runs),
        return_exceptions=True,
    )
    by_run = dict(zip(runs, outcomes, strict=True))
    assert isinstance(by_run.pop("taken"), LeaseLostError)
    assert isinstance(by_run.pop("cancelled"), RunCancelling)
    assert by_run == {"first": [], "held": [], "also-held": []}
    for r in runs:
        written = [(s.seq, s.status) for s in await store.list_steps(r)]
        assert written == ([] if r in ("taken", "cancelled") else [(1, "completed")]), r
    assert (await run_of(store, "held")).updated_at == at(1)
    assert (await run_of(store, "taken")).lease_owner == "owner-2"


async def test_settle_is_allowed_while_cancelling(store: Store) -> None:
    await create(store, spec("a"))
    await lease(store, "a")
    await store.cancel_run("a", T0, None)
    await store.settle_run("a", "owner-1", Writes(), Settlement(RunStatus.CANCELLED), at(1))
    run = await run_of(store, "a")
    assert run.status == RunStatus.CANCELLED and run.lease_owner is None


async def test_checkpoint_upserts_steps_consumes_signals_and_creates_children(
    store: Store,
) -> None:
    await create(store, spec("a"))
    await store.deliver_signal("a", "go", "x", T0)
    await store.deliver_signal("a", "go", "y", T0)
    claimed = await claim(store, "a")
    assert claimed.claim is not None
    first_signal = claimed.claim.signals[0]
    await store.checkpoint("a", "owner-1", Writes(steps=[step("a", 1, StepStatus.RUNNING)]), T0)
    writes = Writes(
        steps=[step("a", 1, output="done"), step("a", 2, StepStatus.RUNNING)],
        consumed_signals=[first_signal.id],
        children=[spec("child", parent_id="a")],
    )
    started = await store.checkpoint("a", "owner-1", writes, at(1))
    assert [(s.run.id if s.run else None, s.created) for s in started] == [("child", True)]
    assert (await run_of(store, "child")).parent_id == "a"
    steps = await store.list_steps("a")
    assert [(s.seq, s.status, s.output) for s in steps] == [
        (1, "completed", "done"),
        (2, "running", None),
    ]
    assert (await run_of(store, "a")).updated_at == at(1)
    await store.suspend_run("a", "owner-1", Writes(), T0, at(1))
    again = await claim(store, "a", now=at(1))
    assert again.claim is not None
    assert [s.payload for s in again.claim.signals] == ["y"]


async def test_checkpoint_children_pass_through_their_gates(store: Store) -> None:
    await create(store, spec("a"), spec("busy", quota=QuotaGate("q", 1)))
    await lease(store, "a")
    children = [spec("c1", parent_id="a", quota=QuotaGate("q", 1)), spec("c2", parent_id="a")]
    refused, created = await store.checkpoint("a", "owner-1", Writes(children=children), T0)
    assert isinstance(refused.rejected, ConcurrencyLimitError) and refused.run is None
    assert created.created
    assert await store.get_run("c1") is None


async def test_suspend_parks_the_run_and_releases_the_lease(store: Store) -> None:
    await create(store, spec("a"))
    rewake = await suspend(store, "a", at(60), writes=Writes(steps=[step("a", 1)]))
    assert rewake is False
    run = await run_of(store, "a")
    assert run.status == RunStatus.SUSPENDED and run.wake_at == at(60)
    assert run.lease_owner is None and run.lease_expires_at is None
    assert [s.seq for s in await store.list_steps("a")] == [1]


async def test_suspend_returns_true_and_stays_due_when_a_wake_arrived_in_the_turn(
    store: Store,
) -> None:
    await create(store, spec("a"))
    await lease(store, "a")
    await store.deliver_signal("a", "go", None, at(1))
    assert (await run_of(store, "a")).wake_requested_at == at(1)
    assert await store.suspend_run("a", "owner-1", Writes(), at(60), at(2)) is True
    run = await run_of(store, "a")
    assert run.status == RunStatus.SUSPENDED and run.wake_at == at(2)
    assert run.wake_requested_at is None
    assert await store.due_run_ids(at(2), 10, None) == ["a"]


async def test_a_run_denied_admission_is_parked_blocked_and_claimed_when_due(
    store: Store,
) -> None:
    """``blocked`` tells a run waiting for a step-queue slot from one waiting for time; it is
    found due and claimed like a suspended one."""
    await create(store, spec("a"))
    await lease(store, "a")
    assert await store.suspend_run("a", "owner-1", Writes(), at(60), T0, blocked=True) is False
    run = await run_of(store, "a")
    assert (run.status, run.wake_at, run.lease_owner) == (RunStatus.BLOCKED, at(60), None)
    assert await store.due_run_ids(at(60), 10, None) == ["a"]
    assert (await lease(store, "a", now=at(60))).status == RunStatus.RUNNING


# ---------------------------------------------------------------- settle_run


async def test_settle_finishes_the_run_and_releases_the_lease(store: Store) -> None:
    await create(store, spec("a"))
    await lease(store, "a")
    writes = Writes(steps=[step("a", 1)])
    assert (await store.settle_run("a", "owner-1", writes, DONE, at(3))).woken == []
    run = await run_of(store, "a")
    assert (run.status, run.output, run.updated_at) == (RunStatus.COMPLETED, {"ok": True}, at(3))
    assert run.lease_owner is None and run.lease_expires_at is None and run.wake_at is None
    assert [s.seq for s in await store.list_steps("a")] == [1]


async def test_settle_releases_the_slot_and_wakes_the_oldest_waiters(store: Store) -> None:
    gate = key(limit=2)
    await create(store, *(spec(i, created=n, singleton=gate) for n, i in enumerate("abcde")))
    await lease(store, "a")
    await lease(store, "b")
    for waiter in ("e", "d", "c"):
        assert (await claim(store, waiter)).parked
    woken = (await store.settle_run("a", "owner-1", Writes(), DONE, at(1))).woken
    assert woken == ["c"]
    assert (await run_of(store, "c")).wake_at == at(1)
    assert (await run_of(store, "d")).wake_at == T0 + 2 * RETRY  # its second denial
    assert not (await run_of(store, "a")).holds_slot
    assert (await lease(store, "c", now=at(1))).holds_slot


async def test_settle_wakes_the_parent(store: Store) -> None:
    await create(store, spec("parent"))
    await suspend(store, "parent", None)
    await create(store, spec("child", parent_id="parent"))
    assert await settle(store, "child", now=at(1)) == ["parent"]
    assert (await run_of(store, "parent")).wake_at == at(1)


async def test_settle_stamps_a_wake_request_on_a_leased_parent(store: Store) -> None:
    await create(store, spec("parent"), spec("child", parent_id="parent"))
    await lease(store, "parent")
    await settle(store, "child", now=at(1))
    assert (await run_of(store, "parent")).wake_requested_at == at(1)


async def test_settle_creates_the_continuation_without_gates(store: Store) -> None:
    quota = QuotaGate("q", limit=1)
    await create(store, spec("a", quota=quota), spec("busy", singleton=key(max_queue_depth=0)))
    await lease(store, "a")
    continuation = spec(
        "a~1", created=1, quota=quota, singleton=key(max_queue_depth=0, replace=True)
    )
    settlement = Settlement(RunStatus.COMPLETED, {"continued_as": "a~1"}, None, continuation)
    await create(store, spec("other", quota=QuotaGate("q", limit=9)))
    woken = (await store.settle_run("a", "owner-1", Writes(), settlement, at(1))).woken
    assert woken == ["a~1"]
    assert await status_of(store, "a~1") == RunStatus.PENDING
    assert await status_of(store, "busy") == RunStatus.PENDING


# ---------------------------------------------------------------- failure handlers

BOOM = {"type": "Boom", "message": "no"}


def failing(handler: RunSpec | None, status: RunStatus = RunStatus.FAILED) -> Settlement:
    """A failed (or dead) settlement that starts ``handler``."""
    return Settlement(status, None, BOOM, handler=handler)


def handler_of(run_id: str, n: int = 1, **fields: Any) -> RunSpec:
    return spec(f"{run_id}.failure.{n}", created=1, workflow="alert", **fields)


async def test_a_failed_settlement_creates_its_handler_in_the_same_write(store: Store) -> None:
    await create(store, spec("a"))
    await lease(store, "a")
    result = await store.settle_run("a", "owner-1", Writes(), failing(handler_of("a")), at(1))
    assert result.woken == ["a.failure.1"]
    assert result.handler is not None and result.handler.created
    run = await run_of(store, "a")
    assert (run.status, run.error, run.failures) == (RunStatus.FAILED, BOOM, 1)
    handler = await run_of(store, "a.failure.1")
    assert (handler.status, handler.workflow, handler.input) == (
        RunStatus.PENDING,
        "alert",
        {"id": "a.failure.1"},
    )


async def test_failures_count_failed_and_dead_settlements_and_outlive_a_requeue(
    store: Store,
) -> None:
    await create(store, spec("a"), spec("b"))
    await settle(store, "a", failing(None))
    assert (await store.requeue_run("a", at(1), None)).failures == 1
    await settle(store, "a", failing(None, RunStatus.DEAD), now=at(2))
    await store.requeue_run("a", at(3), None)
    await settle(store, "a", now=at(4))
    assert (await run_of(store, "a")).failures == 2
    await store.cancel_run("b", T0, None)
    assert (await run_of(store, "b")).failures == 0


async def test_a_handler_refused_by_its_quota_is_recorded_on_the_failed_run(store: Store) -> None:
    quota = QuotaGate("alerts", 1)
    await create(store, spec("a"), spec("busy", workflow="alert", quota=quota))
    await lease(store, "a")
    settlement = failing(handler_of("a", quota=quota))
    result = await store.settle_run("a", "owner-1", Writes(), settlement, at(1))
    assert result.woken == [] and result.handler is not None
    assert isinstance(result.handler.rejected, ConcurrencyLimitError)
    run = await run_of(store, "a")
    assert (run.status, run.failures) == (RunStatus.FAILED, 1)
    assert run.error == {
        **BOOM,
        "handler_error": {
            "type": "ConcurrencyLimitError",
            "message": str(result.handler.rejected),
            "attrs": {"workflow": "alert", "key": "alerts", "limit": 1, "active": 1},
        },
    }
    assert await store.get_run("a.failure.1") is None


async def test_a_handler_counts_against_its_quota_once_the_failed_run_has_settled(
    store: Store,
) -> None:
    quota = QuotaGate("tenant", 1)
    await create(store, spec("a", quota=quota))
    await lease(store, "a")
    settlement = failing(handler_of("a", quota=quota))
    result = await store.settle_run("a", "owner-1", Writes(), settlement, at(1))
    assert result.woken == ["a.failure.1"]
    assert (await run_of(store, "a")).error == BOOM


async def test_a_handler_behind_a_full_singleton_key_is_created_waiting(store: Store) -> None:
    lane = SingletonGate("alerts")
    await create(store, spec("busy", workflow="alert", singleton=lane), spec("a"))
    await lease(store, "busy")
    await lease(store, "a")
    settlement = failing(handler_of("a", singleton=lane))
    result = await store.settle_run("a", "owner-1", Writes(), settlement, at(1))
    assert result.woken == [] and result.handler is not None
    assert result.handler.created and result.handler.waiting
    assert await status_of(store, "a.failure.1") == RunStatus.BLOCKED
    woken = (await store.settle_run("busy", "owner-1", Writes(), DONE, at(2))).woken
    assert woken == ["a.failure.1"]


async def test_a_handler_run_that_exists_is_not_created_again(store: Store) -> None:
    await create(store, spec("a"), handler_of("a"))
    await lease(store, "a")
    result = await store.settle_run("a", "owner-1", Writes(), failing(handler_of("a")), at(1))
    assert result.woken == [] and result.handler is not None and not result.handler.created
    assert (await run_of(store, "a")).error == BOOM


async def test_a_settlement_refused_by_its_fence_creates_no_handler(store: Store) -> None:
    await create(store, spec("stale"), spec("cancelled"))
    await lease(store, "stale")
    await lease(store, "stale", owner="second", now=T0 + LEASE)
    with pytest.raises(LeaseLostError):
        await store.settle_run("stale", "owner-1", Writes(), failing(handler_of("stale")), T0)
    await lease(store, "cancelled")
    await store.cancel_run("cancelled", T0, None)
    with pytest.raises(RunCancelling):
        await store.settle_run(
            "cancelled", "owner-1", Writes(), failing(handler_of("cancelled")), T0
        )
    assert await store.get_runs(["stale.failure.1", "cancelled.failure.1"]) == {}
    assert (await run_of(store, "cancelled")).failures == 0


async def test_a_recovery_beyond_the_limit_of_a_dead_letter_workflow_leases_the_run_dying(
    store: Store,
) -> None:
    await create(store, spec("a"), spec("b", workflow="plain"))
    for run_id in ("a", "b"):
        await lease(store, run_id)
    dying = await claim(
        store, "a", owner="second", now=T0 + LEASE, max_recoveries=0, dead_letters=frozenset({"wf"})
    )
    assert dying.dying and dying.claim is not None and dying.settled is None
    run = dying.claim.run
    assert (run.status, run.lease_owner, run.recoveries) == (RunStatus.RUNNING, "second", 1)
    plain = await claim(
        store, "b", now=T0 + LEASE, max_recoveries=0, dead_letters=frozenset({"wf"})
    )
    assert not plain.dying and plain.settled is not None
    assert plain.settled.status == RunStatus.DEAD


async def test_a_dying_run_whose_claimer_died_is_dying_again_then_settles_dead_once(
    store: Store,
) -> None:
    await create(store, spec("a"))
    await lease(store, "a")
    letters = frozenset({"wf"})
    for n, owner in enumerate(("second", "third"), start=1):
        outcome = await claim(
            store, "a", owner=owner, now=T0 + n * LEASE, max_recoveries=0, dead_letters=letters
        )
        assert outcome.dying and outcome.claim is not None
        assert outcome.claim.run.recoveries == n
    dead = failing(handler_of("a"), RunStatus.DEAD)
    result = await store.settle_run("a", "third", Writes(), dead, at(70))
    assert result.woken == ["a.failure.1"]
    run = await run_of(store, "a")
    assert (run.status, run.failures, run.recoveries) == (RunStatus.DEAD, 1, 2)


# ---------------------------------------------------------------- signals


async def test_a_signal_wakes_a_run_waiting_for_its_name(store: Store) -> None:
    await create(store, spec("a"))
    await suspend(store, "a", None, writes=waits_for_signal("a", "go"))
    assert await store.deliver_signal("a", "other", None, at(1)) is False
    assert (await run_of(store, "a")).wake_at is None
    assert await store.deliver_signal("a", "go", {"v": 1}, at(2)) is True
    assert (await run_of(store, "a")).wake_at == at(2)
    outcome = await claim(store, "a", now=at(2))
    assert outcome.claim is not None
    assert [(s.name, s.payload, s.created_at) for s in outcome.claim.signals] == [
        ("other", None, at(1)),
        ("go", {"v": 1}, at(2)),
    ]


async def test_a_signal_to_a_leased_run_stamps_a_wake_request(store: Store) -> None:
    await create(store, spec("a"))
    await lease(store, "a")
    assert await store.deliver_signal("a", "go", None, at(1)) is False
    assert (await run_of(store, "a")).wake_requested_at == at(1)


async def test_a_signal_to_a_pending_run_is_buffered(store: Store) -> None:
    await create(store, spec("a"))
    assert await store.deliver_signal("a", "go", 7, T0) is False
    outcome = await claim(store, "a")
    assert outcome.claim is not None and [s.payload for s in outcome.claim.signals] == [7]


async def test_signals_to_unknown_or_finished_runs_raise_and_store_nothing(
    store: Store,
) -> None:
    await create(store, spec("a"))
    with pytest.raises(RunNotFoundError):
        await store.deliver_signal("unknown", "go", None, T0)
    await settle(store, "a")
    with pytest.raises(RunFinishedError):
        await store.deliver_signal("a", "go", None, T0)
    assert await store.get_run("unknown") is None


# ---------------------------------------------------------------- updates


def waits_for_update(run_id: str, name: str) -> Writes:
    return Writes(steps=[step(run_id, 1, StepStatus.PENDING, name=name, kind=StepKind.UPDATE)])


async def test_an_update_wakes_only_a_run_waiting_for_an_update_of_its_name(store: Store) -> None:
    await create(store, spec("signal-waiter"), spec("update-waiter"))
    await suspend(store, "signal-waiter", None, writes=waits_for_signal("signal-waiter", "go"))
    await suspend(store, "update-waiter", None, writes=waits_for_update("update-waiter", "go"))
    assert (
        await store.deliver_signal("signal-waiter", "go", 1, at(1), kind=StepKind.UPDATE) is False
    )
    assert (await run_of(store, "signal-waiter")).wake_at is None
    assert await store.deliver_signal("update-waiter", "go", 2, at(2)) is False
    assert (await run_of(store, "update-waiter")).wake_at is None
    assert await store.deliver_signal("update-waiter", "go", 3, at(3), kind=StepKind.UPDATE)
    assert (await run_of(store, "update-waiter")).wake_at == at(3)


async def test_an_update_is_buffered_among_the_signals_under_its_own_name(store: Store) -> None:
    await create(store, spec("a"))
    await store.deliver_signal("a", "go", {"id": "u1"}, T0, kind=StepKind.UPDATE)
    await store.deliver_signal("a", "go", "plain", at(1))
    signals = await store.list_signals("a")
    assert [(s.name, s.payload) for s in signals] == [
        (buffered_name(StepKind.UPDATE, "go"), {"id": "u1"}),
        ("go", "plain"),
    ]
    assert buffered_name(StepKind.UPDATE, "go") == "$update:go"


async def test_updates_to_unknown_or_finished_runs_raise_and_store_nothing(store: Store) -> None:
    await create(store, spec("a"))
    with pytest.raises(RunNotFoundError):
        await store.deliver_signal("unknown", "go", None, T0, kind=StepKind.UPDATE)
    await settle(store, "a")
    with pytest.raises(RunFinishedError):
        await store.deliver_signal("a", "go", None, T0, kind=StepKind.UPDATE)
    assert await store.list_signals("a") == []


def reply(run_id: str, seq: int, update_id: str, status: str, **fields: Any) -> StepRecord:
    answer = {"update": update_id}
    return step(run_id, seq, status, name="ask", kind=StepKind.REPLY, input=answer, **fields)


async def test_a_reply_is_found_by_its_update_id(store: Store) -> None:
    await create(store, spec("a"), spec("b"))
    await lease(store, "a")
    records = [
        step("a", 1, name="ask", kind=StepKind.UPDATE, output={"id": "u1", "payload": 1}),
        reply("a", 2, "u1", StepStatus.COMPLETED, output={"answer": 42}),
        reply("a", 3, "u2", StepStatus.FAILED, error={"type": "E", "message": "no"}),
        step("a", 4, name="ask", kind=StepKind.STEP, input={"update": "u3"}),
    ]
    await store.checkpoint("a", "owner-1", Writes(steps=records), T0)
    found = await store.get_reply("a", "u1")
    assert found is not None and (found.seq, found.output) == (2, {"answer": 42})
    rejected = await store.get_reply("a", "u2")
    assert rejected is not None and rejected.status == StepStatus.FAILED
    assert rejected.error is not None and rejected.error["message"] == "no"
    assert await store.get_reply("a", "u3") is None  # not a reply record
    assert await store.get_reply("b", "u1") is None  # another run's
    assert await store.get_reply("unknown", "u1") is None


async def test_a_reply_outlives_the_runs_settlement(store: Store) -> None:
    await create(store, spec("a"))
    await lease(store, "a")
    writes = Writes(steps=[reply("a", 1, "u1", StepStatus.COMPLETED, output="yes")])
    await store.settle_run("a", "owner-1", writes, DONE, at(1))
    found = await store.get_reply("a", "u1")
    assert found is not None and found.output == "yes"


# ---------------------------------------------------------------- cancel_run


async def test_cancel_cascades_to_active_descendants(store: Store) -> None:
    await create(store, spec("root"), spec("child", parent_id="root"))
    await create(store, spec("grandchild", parent_id="child"), spec("done", parent_id="root"))
    await create(store, spec("unrelated"))
    await settle(store, "done")
    await lease(store, "grandchild")
    result = await store.cancel_run("root", at(1), {"type": "Cancelled", "message": "stop"})
    changed = result.changed
    assert changed[0] == "root" and set(changed) == {"root", "child", "grandchild"}
    assert result.woken == []  # the parents woken are cancelled themselves
    assert await status_of(store, "root") == RunStatus.CANCELLED
    assert await status_of(store, "child") == RunStatus.CANCELLED
    assert await status_of(store, "grandchild") == RunStatus.CANCELLING
    assert await status_of(store, "done") == RunStatus.COMPLETED
    assert await status_of(store, "unrelated") == RunStatus.PENDING
    assert (await run_of(store, "child")).error == {"type": "Cancelled", "message": "stop"}


async def test_cancel_leaves_a_detached_child_and_its_own_children_running(
    store: Store,
) -> None:
    await create(store, spec("root"), spec("kept", parent_id="root", detached=True))
    await create(store, spec("kept.child", parent_id="kept"), spec("gone", parent_id="root"))
    result = await store.cancel_run("root", at(1), None)
    assert set(result.changed) == {"root", "gone"}
    assert await status_of(store, "kept") == RunStatus.PENDING
    assert await status_of(store, "kept.child") == RunStatus.PENDING
    assert (await run_of(store, "kept")).detached
    assert set((await store.cancel_run("kept", at(2), None)).changed) == {"kept", "kept.child"}


async def test_cancel_of_an_unknown_run_raises_and_of_a_finished_run_changes_nothing(
    store: Store,
) -> None:
    with pytest.raises(RunNotFoundError):
        await store.cancel_run("unknown", T0, None)
    await create(store, spec("a"))
    await settle(store, "a")
    assert await store.cancel_run("a", T0, None) == CancelResult([], [])
    assert await status_of(store, "a") == RunStatus.COMPLETED


async def test_cancelling_twice_changes_nothing_the_second_time(store: Store) -> None:
    await create(store, spec("a"))
    await lease(store, "a")
    assert (await store.cancel_run("a", T0, None)).changed == ["a"]
    assert await store.cancel_run("a", T0, None) == CancelResult([], [])


async def test_cancel_of_a_waiting_holder_releases_its_slot_and_wakes_a_waiter(
    store: Store,
) -> None:
    await create(store, spec("a", singleton=key()), spec("b", created=1, singleton=key()))
    await suspend(store, "a", None)
    assert (await claim(store, "b")).parked
    assert await store.cancel_run("a", at(1), None) == CancelResult(["a"], ["b"])
    b = await run_of(store, "b")
    assert b.wake_at == at(1)
    assert (await lease(store, "b", now=at(1))).holds_slot


async def _held_with_two_waiters(store: Store) -> None:
    """ "a" holds the key's one slot; "b" and "c" wait behind it, parked by their claims."""
    await create(store, *(spec(r, created=n, singleton=key()) for n, r in enumerate("abc")))
    await lease(store, "a")
    for waiter in "bc":
        assert (await claim(store, waiter)).parked


async def test_cancel_of_a_waiter_woken_for_a_slot_wakes_the_next_one(store: Store) -> None:
    # The release woke "b" (the oldest waiter); "b" is cancelled before its claim: the slot
    # goes to "c" at once, not at its fallback timer.
    await _held_with_two_waiters(store)
    released = await store.settle_run("a", "owner-1", Writes(), DONE, at(1))
    assert released.woken == ["b"]
    assert await store.cancel_run("b", at(2), None) == CancelResult(["b"], ["c"])
    assert (await run_of(store, "c")).wake_at == at(2)
    assert (await lease(store, "c", now=at(2))).holds_slot


async def test_cancel_of_a_waiter_behind_a_full_key_wakes_nobody(store: Store) -> None:
    await _held_with_two_waiters(store)
    before = (await run_of(store, "c")).wake_at
    assert await store.cancel_run("b", at(2), None) == CancelResult(["b"], [])
    assert (await run_of(store, "c")).wake_at == before


async def test_cancel_of_a_child_wakes_its_waiting_parent(store: Store) -> None:
    await create(store, spec("parent"), spec("child", parent_id="parent"))
    await suspend(store, "parent", None)
    assert await store.cancel_run("child", at(1), None) == CancelResult(["child"], ["parent"])
    assert (await run_of(store, "parent")).wake_at == at(1)


async def test_cancel_drops_buffered_signals_of_settled_runs(store: Store) -> None:
    await create(store, spec("a"))
    await store.deliver_signal("a", "go", None, T0)
    await store.cancel_run("a", T0, None)
    await store.requeue_run("a", at(1), None)
    outcome = await claim(store, "a", now=at(1))
    assert outcome.claim is not None and list(outcome.claim.signals) == []


# ---------------------------------------------------------------- requeue_run


async def test_requeue_keeps_completed_checkpoints_and_drops_the_others(store: Store) -> None:
    await create(store, spec("a", singleton=key()))
    await lease(store, "a")
    writes = Writes(steps=[step("a", 1), step("a", 2, StepStatus.FAILED), step("a", 3, "running")])
    failed = Settlement(RunStatus.FAILED, None, {"type": "Boom", "message": "no"})
    await store.settle_run("a", "owner-1", writes, failed, T0)
    run = await store.requeue_run("a", at(1), at(100))
    assert run.status == RunStatus.PENDING and run.error is None and run.output is None
    assert (run.deadline_at, run.updated_at, run.recoveries, run.holds_slot) == (
        at(100),
        at(1),
        0,
        False,
    )
    assert await run_of(store, "a") == run
    assert [s.seq for s in await store.list_steps("a")] == [1]
    assert (await lease(store, "a", now=at(1))).holds_slot


async def test_requeue_clears_recoveries_of_a_dead_run(store: Store) -> None:
    await create(store, spec("a"))
    await lease(store, "a")
    await claim(store, "a", now=T0 + LEASE, max_recoveries=0)
    assert await status_of(store, "a") == RunStatus.DEAD
    assert (await store.requeue_run("a", at(99), None)).recoveries == 0


async def test_requeue_refuses_unknown_and_active_or_completed_runs(store: Store) -> None:
    with pytest.raises(RunNotFoundError):
        await store.requeue_run("unknown", T0, None)
    await create(store, spec("active"), spec("done"))
    await settle(store, "done")
    with pytest.raises(RunExistsError, match="only failed, dead or cancelled"):
        await store.requeue_run("active", T0, None)
    with pytest.raises(RunFinishedError, match="only failed, dead or cancelled") as finished:
        await store.requeue_run("done", T0, None)
    assert (finished.value.run_id, finished.value.status) == ("done", "completed")
    assert await status_of(store, "done") == RunStatus.COMPLETED
    assert await status_of(store, "active") == RunStatus.PENDING


async def test_requeue_over_its_quota_raises_and_writes_nothing(store: Store) -> None:
    quota = QuotaGate("tenant", 1)
    await create(store, spec("a", quota=quota))
    await lease(store, "a")
    await store.settle_run("a", "owner-1", Writes(), Settlement(RunStatus.FAILED), T0)
    await create(store, spec("b", created=1, quota=quota))
    failed = await run_of(store, "a")
    with pytest.raises(ConcurrencyLimitError) as refused:
        await store.requeue_run("a", at(2), None, quota=quota)
    assert (refused.value.key, refused.value.limit, refused.value.active) == ("tenant", 1, 1)
    assert await run_of(store, "a") == failed
    await settle(store, "b")
    assert (await store.requeue_run("a", at(3), None, quota=quota)).status == RunStatus.PENDING


async def test_requeue_behind_a_full_singleton_backlog_raises_and_writes_nothing(
    store: Store,
) -> None:
    gate = key(max_queue_depth=0)
    await create(store, spec("a", singleton=gate))
    await store.cancel_run("a", T0, None)
    await create(store, spec("b", created=1, singleton=gate))
    with pytest.raises(SingletonQueueFullError):
        await store.requeue_run("a", at(2), None, singleton=gate)
    assert await status_of(store, "a") == RunStatus.CANCELLED


async def test_a_run_remembers_the_quota_it_was_admitted_under(store: Store) -> None:
    quota = QuotaGate("tenant", 3, frozenset({RunStatus.RUNNING, RunStatus.PENDING}))
    await create(store, spec("a", quota=quota), spec("plain"))
    assert (await run_of(store, "a")).quota == quota
    assert (await run_of(store, "plain")).quota is None


# ---------------------------------------------------------------- events


async def test_publish_event_records_it_and_wakes_runs_waiting_for_its_name(
    store: Store,
) -> None:
    await create(store, spec("a"), spec("b"), spec("c"))
    await suspend(store, "a", None, writes=waits_for_event("a", "paid"))
    await suspend(store, "b", None, writes=waits_for_event("b", "shipped"))
    event, created, woken = await store.publish_event("paid", {"n": 1}, None, at(1))
    assert created and woken == ["a"]
    assert (event.seq, event.name, event.payload, event.created_at) == (1, "paid", {"n": 1}, at(1))
    assert (await run_of(store, "a")).wake_at == at(1)
    assert (await run_of(store, "b")).wake_at is None


async def test_publish_event_is_idempotent_by_id(store: Store) -> None:
    await create(store, spec("a"))
    first, created, _ = await store.publish_event("paid", 1, "evt-1", T0)
    await suspend(store, "a", None, writes=waits_for_event("a", "paid"))
    again, created_again, woken = await store.publish_event("paid", 2, "evt-1", at(1))
    assert created and not created_again and woken == []
    assert again == first and again.payload == 1 and again.id == "evt-1"
    assert (await run_of(store, "a")).wake_at is None
    assert await store.latest_event_seq() == 1


async def test_a_suspension_is_due_at_once_when_an_event_its_waits_have_not_read_exists(
    store: Store,
) -> None:
    """An event published while the turn ran saw no wait to wake: the suspension checks."""
    await create(store, spec("a"), spec("b"), spec("c"))
    await store.publish_event("paid", 1, None, T0)
    await store.publish_event("shipped", 2, None, T0)
    unread = replace(waits_for_event("a", "paid"), events=[("paid", 0)])
    assert await suspend(store, "a", at(60), writes=unread, now=at(1)) is True
    assert (await run_of(store, "a")).wake_at == at(1)
    read = replace(waits_for_event("b", "paid"), events=[("paid", 1)])
    assert await suspend(store, "b", at(60), writes=read, now=at(1)) is False
    assert (await run_of(store, "b")).wake_at == at(60)
    other = replace(waits_for_event("c", "paid"), events=[("paid", 1), ("refunded", 0)])
    assert await suspend(store, "c", None, writes=other, now=at(1)) is False
    assert (await run_of(store, "c")).wake_at is None


async def test_events_after_are_the_named_events_after_a_seq_oldest_first(
    store: Store,
) -> None:
    assert await store.latest_event_seq() == 0
    for n, name in enumerate(["a", "b", "a", "a", "b"]):
        await store.publish_event(name, n, None, at(n))
    assert [e.seq for e in await store.events_after("a", 0, 10)] == [1, 3, 4]
    assert [e.payload for e in await store.events_after("a", 1, 10)] == [2, 3]
    assert [e.seq for e in await store.events_after("a", 0, 2)] == [1, 3]
    assert await store.events_after("c", 0, 10) == []
    assert await store.latest_event_seq() == 5


# ---------------------------------------------------------------- reads


async def test_get_run_and_get_runs_return_only_what_exists(store: Store) -> None:
    await create(store, spec("a"), spec("b"))
    assert await store.get_run("unknown") is None
    runs = await store.get_runs(["b", "unknown", "a"])
    assert set(runs) == {"a", "b"} and runs["a"].id == "a"
    assert await store.get_runs([]) == {}


AWKWARD_IDS = ['quote"d', "back\\slash", "a,b", "{brace}", "NULL", "", " spaced ", "ünï"]


async def test_ids_and_keys_of_any_text_round_trip(store: Store) -> None:
    await create(store, *[spec(run_id, singleton=SingletonGate(run_id)) for run_id in AWKWARD_IDS])
    assert set(await store.get_runs([*AWKWARD_IDS, "other"])) == set(AWKWARD_IDS)
    for run_id in AWKWARD_IDS:
        await lease(store, run_id)
    owners = dict.fromkeys(AWKWARD_IDS, "owner-1")
    assert await store.renew_leases(owners, at(100)) == set(AWKWARD_IDS)
    settled = await store.settle_run('quote"d', "owner-1", Writes(), DONE, at(1))
    assert settled.woken == []
    assert (await run_of(store, 'quote"d')).status == RunStatus.COMPLETED


async def test_list_runs_is_newest_first_then_by_id_descending(store: Store) -> None:
    await create(store, spec("a", created=1), spec("b", created=1), spec("c", created=2))
    await create(store, spec("old", created=0))
    assert [r.id for r in await store.list_runs()] == ["c", "b", "a", "old"]
    assert [r.id for r in await store.list_runs(limit=2, offset=1)] == ["b", "a"]


async def test_list_runs_applies_every_filter_given(store: Store) -> None:
    await create(
        store,
        spec("a", workflow="w1", tags=("red", "blue")),
        spec("b", workflow="w1", tags=("blue",), parent_id="a"),
        spec("c", workflow="w2", tags=("red",), parent_id="a"),
    )
    await settle(store, "c")

    async def ids(**filters: Any) -> list[str]:
        return sorted(r.id for r in await store.list_runs(**filters))

    assert await ids(workflow="w1") == ["a", "b"]
    assert await ids(status=RunStatus.COMPLETED) == ["c"]
    assert await ids(tag="red") == ["a", "c"]
    assert await ids(tag="re") == []
    assert await ids(parent_id="a") == ["b", "c"]
    assert await ids(workflow="w1", tag="blue", parent_id="a") == ["b"]


async def test_the_run_listings_keep_the_namespace_asked_for(store: Store) -> None:
    await create(
        store,
        spec("e1", namespace="eu", created=1),
        spec("u1", namespace="us", created=2),
        spec("n1", created=3),
        spec("e2", namespace="eu", created=4, parent_id="e1"),
    )
    await settle(store, "e2")
    assert [r.id for r in await store.list_runs(namespace="eu")] == ["e2", "e1"]
    assert [r.id for r in await store.list_runs(namespace="eu", parent_id="e1")] == ["e2"]
    assert [r.id for r in await store.list_runs(namespace="us")] == ["u1"]
    assert [r.id for r in await store.list_runs()] == ["e2", "n1", "u1", "e1"]
    assert [r.id for r in await store.page_runs(RunQuery(namespace="eu"), 10)] == ["e2", "e1"]
    assert await store.page_runs(RunQuery(namespace="asia"), 10) == []
    assert await store.count_runs(RunQuery(namespace="eu")) == {
        RunStatus.PENDING: 1,
        RunStatus.COMPLETED: 1,
    }
    assert await store.count_runs(RunQuery(namespace="us", status=RunStatus.COMPLETED)) == {}


async def test_page_runs_walks_newest_first_from_the_cursor(store: Store) -> None:
    await create(store, spec("a", created=1), spec("b", created=1), spec("c", created=2))
    await create(store, spec("old", created=0))
    first = await store.page_runs(RunQuery(), 2)
    assert [r.id for r in first] == ["c", "b"]
    after = RunCursor(first[-1].created_at, first[-1].id)
    # A run created meanwhile, newer than the cursor, never shifts the next page.
    await create(store, spec("new", created=3))
    assert [r.id for r in await store.page_runs(RunQuery(after=after), 2)] == ["a", "old"]
    last = RunCursor(at(0), "old")
    assert await store.page_runs(RunQuery(after=last), 2) == []


async def test_page_runs_applies_every_filter_given(store: Store) -> None:
    await create(
        store,
        spec("a", workflow="w1", tags=("red", "blue"), created=1),
        spec("b", workflow="w1", tags=("blue",), created=2),
        spec("c", workflow="w2", tags=("red",), created=3),
    )
    await settle(store, "c")

    async def ids(**filters: Any) -> list[str]:
        return [r.id for r in await store.page_runs(RunQuery(**filters), 10)]

    assert await ids(workflow="w1") == ["b", "a"]
    assert await ids(status=RunStatus.COMPLETED) == ["c"]
    assert await ids(tag="red") == ["c", "a"]
    assert await ids(tag="re") == []
    assert await ids(created_from=at(2)) == ["c", "b"]
    assert await ids(created_until=at(2)) == ["a"]
    assert await ids(workflow="w1", tag="blue", after=RunCursor(at(2), "b")) == ["a"]


async def test_count_runs_counts_what_the_query_matches_by_status(store: Store) -> None:
    await create(
        store, *(spec(f"r{n}", workflow="w1" if n < 110 else "w2", created=n) for n in range(112))
    )
    await settle(store, "r0")
    await settle(store, "r111")
    counts = await store.count_runs(RunQuery(after=RunCursor(at(50), "r50")))
    assert counts == {RunStatus.PENDING: 110, RunStatus.COMPLETED: 2}
    assert await store.count_runs(RunQuery(workflow="w2")) == {
        RunStatus.PENDING: 1,
        RunStatus.COMPLETED: 1,
    }
    assert await store.count_runs(RunQuery(workflow="none")) == {}


# ---------------------------------------------------------------- run attributes

ATTRIBUTED = {
    "text": {"customer": "acme", "tier": "2"},
    "int": {"customer": "acme", "tier": 2},
    "float": {"customer": "globex", "tier": 2.0, "ratio": 0.1},
    "true": {"customer": "acme", "vip": True},
    "one": {"customer": "acme", "vip": 1},
    "false": {"customer": "initech", "vip": False, "big": -(2**62)},
    "awkward": {"ключ 'quoted' \"twice\"": "значение ☃", "empty": ""},
    "plain": {},
}


async def attributed_runs(store: Store) -> None:
    """The runs of ``ATTRIBUTED``, one a second in that order (so newest first is reversed)."""
    await create(
        store,
        *(
            spec(run_id, created=n, workflow="w2" if run_id == "one" else "wf", attributes=attrs)
            for n, (run_id, attrs) in enumerate(ATTRIBUTED.items())
        ),
    )


async def test_a_run_keeps_the_attributes_of_its_spec(store: Store) -> None:
    await attributed_runs(store)
    for run_id, attributes in ATTRIBUTED.items():
        run = await run_of(store, run_id)
        assert run.attributes == attributes and type(run.attributes) is dict, run_id
        assert {k: type(v) for k, v in run.attributes.items()} == {
            k: type(v) for k, v in attributes.items()
        }, run_id
    assert (await store.get_runs(["int"]))["int"].attributes == ATTRIBUTED["int"]


async def test_list_runs_filters_by_every_attribute_given_equal_in_value_and_type(
    store: Store,
) -> None:
    await attributed_runs(store)

    async def ids(**filters: Any) -> list[str]:
        return [r.id for r in await store.list_runs(**filters)]

    assert await ids(attributes={"customer": "acme"}) == ["one", "true", "int", "text"]
    assert await ids(attributes={"tier": "2"}) == ["text"]
    assert await ids(attributes={"tier": 2}) == ["float", "int"]  # numbers compare by value
    assert await ids(attributes={"tier": 2.0, "customer": "acme"}) == ["int"]
    assert await ids(attributes={"vip": True}) == ["true"]  # True is not 1
    assert await ids(attributes={"vip": 1}) == ["one"]
    assert await ids(attributes={"vip": False}) == ["false"]  # False is not 0, nor absent
    assert await ids(attributes={"vip": 0}) == []
    assert await ids(attributes={"ratio": 0.1, "big": -(2**62)}) == []
    assert await ids(attributes={"big": -(2**62)}) == ["false"]
    assert await ids(attributes={"ratio": 0.1}) == ["float"]
    assert await ids(attributes={"ключ 'quoted' \"twice\"": "значение ☃"}) == ["awkward"]
    assert await ids(attributes={"empty": ""}) == ["awkward"]
    assert await ids(attributes={"customer": "acm"}) == []
    assert await ids(attributes={"customer": "acme"}, workflow="w2") == ["one"]
    assert await ids(attributes={"customer": "acme"}, limit=2, offset=1) == ["true", "int"]
    assert await ids(attributes={}) == list(reversed(ATTRIBUTED))


async def test_page_and_count_runs_filter_by_attributes(store: Store) -> None:
    await attributed_runs(store)
    acme = RunQuery(attributes={"customer": "acme"})
    assert [r.id for r in await store.page_runs(acme, 2)] == ["one", "true"]
    after = RunCursor(at(3), "true")
    assert [r.id for r in await store.page_runs(replace(acme, after=after), 10)] == [
        "int",
        "text",
    ]
    assert await store.count_runs(acme) == {RunStatus.PENDING: 4}
    await settle(store, "int")
    assert await store.count_runs(replace(acme, attributes={"customer": "acme", "tier": 2})) == {
        RunStatus.COMPLETED: 1
    }
    assert await store.count_runs(RunQuery(attributes={"customer": "nobody"})) == {}


async def test_pages_by_attributes_break_ties_by_id_and_resume_from_any_cursor(
    store: Store,
) -> None:
    # Runs created at the same instants, some of another customer, tier, workflow or
    # namespace: every page of 3 from the last one's cursor, whatever the filter, lists each
    # run it matches once, newest first and ties by id descending.
    await create(
        store,
        *(
            spec(
                f"r{n:02}",
                created=n // 4,
                workflow="w1" if n % 5 else "w2",
                namespace="eu" if n % 7 else "us",
                attributes={"customer": "acme" if n % 3 else "globex", "tier": n % 2},
            )
            for n in range(40)
        ),
    )
    everyone = await store.list_runs(limit=100)
    for query in (
        RunQuery(attributes={"customer": "acme"}),
        RunQuery(attributes={"tier": 1, "customer": "acme"}),
        RunQuery(attributes={"customer": "acme"}, workflow="w1", namespace="eu"),
        RunQuery(attributes={"customer": "acme"}, created_from=at(2), created_until=at(8)),
    ):
        pages: list[str] = []
        after = None
        while page := await store.page_runs(replace(query, after=after), 3):
            pages += [r.id for r in page]
            after = RunCursor(page[-1].created_at, page[-1].id)
        assert pages == [r.id for r in everyone if query.matches(r)], query
        assert await store.count_runs(query) == {RunStatus.PENDING: len(pages)}, query


async def test_a_run_whose_attribute_is_set_again_is_listed_once_by_its_new_value(
    store: Store,
) -> None:
    await create(store, spec("a", attributes={"stage": "new", "n": 2}), spec("b", created=1))
    await lease(store, "a")
    # A new value, an equal number, and both again.
    merges: list[dict[str, AttributeValue]] = [
        {"stage": "paid"},
        {"n": 2.0},
        {"stage": "paid", "n": 2},
    ]
    for attributes in merges:
        await store.set_attributes("a", "owner-1", Writes(), attributes, at(1))
    filters: list[tuple[dict[str, AttributeValue], list[str]]] = [
        ({"stage": "paid"}, ["a"]),
        ({"stage": "new"}, []),
        ({"n": 2}, ["a"]),
        ({"n": 2, "stage": "paid"}, ["a"]),
    ]
    for wanted, found in filters:
        assert [r.id for r in await store.list_runs(attributes=wanted)] == found, wanted
        assert [r.id for r in await store.page_runs(RunQuery(attributes=wanted), 10)] == found
        counted = await store.count_runs(RunQuery(attributes=wanted))
        assert counted == ({RunStatus.RUNNING: 1} if found else {}), wanted


def attributes_record(run_id: str, seq: int, attributes: dict[str, Any]) -> StepRecord:
    return step(run_id, seq, name="attributes", kind=StepKind.ATTRIBUTES, output=attributes)


async def test_set_attributes_merges_with_its_records_in_one_fenced_write(store: Store) -> None:
    await create(store, spec("a", attributes={"customer": "acme", "stage": "new"}))
    await lease(store, "a")
    first = Writes(steps=[step("a", 1), attributes_record("a", 2, {"stage": "paid", "n": 1})])
    await store.set_attributes("a", "owner-1", first, {"stage": "paid", "n": 1}, at(1))
    run = await run_of(store, "a")
    assert run.attributes == {"customer": "acme", "stage": "paid", "n": 1}
    assert run.updated_at == at(1) and run.status == RunStatus.RUNNING
    assert [(s.seq, s.kind, s.output) for s in await store.list_steps("a")] == [
        (1, "step", None),
        (2, "attributes", {"stage": "paid", "n": 1}),
    ]
    # The listings read the new values at once, and no longer the old ones.
    assert [r.id for r in await store.list_runs(attributes={"stage": "paid", "n": 1})] == ["a"]
    assert await store.list_runs(attributes={"stage": "new"}) == []
    # Any mapping will do, here and in a filter.
    await store.set_attributes("a", "owner-1", Writes(), MappingProxyType({"n": 2.5}), at(2))
    assert (await run_of(store, "a")).attributes == {"customer": "acme", "stage": "paid", "n": 2.5}
    only_n = RunQuery(attributes=MappingProxyType({"n": 2.5}))
    assert await store.count_runs(only_n) == {RunStatus.RUNNING: 1}
    assert [r.id for r in await store.list_runs(attributes=MappingProxyType({"n": 2.5}))] == ["a"]
    await store.suspend_run("a", "owner-1", Writes(), None, at(3))
    assert (await run_of(store, "a")).attributes["n"] == 2.5  # a suspension keeps them


async def test_set_attributes_is_fenced_like_a_checkpoint(store: Store) -> None:
    await create(store, spec("a", attributes={"k": "v"}), spec("b"))
    await lease(store, "a", owner="first")
    await lease(store, "a", owner="second", now=T0 + LEASE)
    writes = Writes(steps=[attributes_record("a", 1, {"k": "w"})])
    with pytest.raises(LeaseLostError):
        await store.set_attributes("a", "first", writes, {"k": "w"}, at(31))
    with pytest.raises(LeaseLostError):
        await store.set_attributes("b", "owner-1", Writes(), {"k": "w"}, at(31))
    await lease(store, "b")
    await store.cancel_run("b", at(1), None)
    with pytest.raises(RunCancelling):
        await store.set_attributes("b", "owner-1", Writes(), {"k": "w"}, at(2))
    assert (await run_of(store, "a")).attributes == {"k": "v"}
    assert (await run_of(store, "b")).attributes == {}
    assert await store.list_steps("a") == [] and await store.list_steps("b") == []
    assert await store.list_runs(attributes={"k": "w"}) == []


async def test_a_requeue_keeps_the_attributes_and_a_prune_leaves_none_behind(
    store: Store,
) -> None:
    await create(store, spec("a", attributes={"customer": "acme"}))
    await settle(store, "a", Settlement(RunStatus.FAILED, error={"m": "x"}), now=at(1))
    requeued = await store.requeue_run("a", at(2), None)
    assert requeued.attributes == {"customer": "acme"}
    await settle(store, "a", now=at(3))
    assert await store.prune_runs(every_status_before(at(10)), 10) == ["a"]
    assert await store.list_runs(attributes={"customer": "acme"}) == []
    # The id used again without attributes is found by none of the old ones.
    await create(store, spec("a"))
    assert await store.list_runs(attributes={"customer": "acme"}) == []
    assert (await run_of(store, "a")).attributes == {}


async def test_run_activity_counts_starts_and_settlements_by_minute_status_and_latency(
    store: Store,
) -> None:
    await create(
        store,
        spec("old", created=-120),  # created and settled before the hour asked for
        spec("fast", created=5),
        spec("slow", created=10),
        spec("broken", created=70),
        spec("waiting", created=75),
        spec("dropped", created=80),
    )
    await settle(store, "old", now=at(-90))
    await settle(store, "fast", now=at(5.05))  # 0.05 s: bucket 0
    await settle(store, "slow", now=at(130))  # 120 s: bucket 6 (<= 300 s)
    await settle(store, "broken", Settlement(RunStatus.FAILED, error=BOOM), now=at(72))  # 2 s
    await settle(store, "dropped", Settlement(RunStatus.CANCELLED), now=at(100))  # 20 s
    found = await store.run_activity(T0, at(3600))
    minute = at(0)  # T0 is a minute's start
    assert sorted(found, key=lambda c: (c.minute, c.status or "")) == [
        ActivityCount(minute, None, None, 2),
        ActivityCount(minute, RunStatus.COMPLETED, latency_bucket(0.05), 1),
        ActivityCount(at(60), None, None, 3),
        ActivityCount(at(60), RunStatus.CANCELLED, latency_bucket(20), 1),
        ActivityCount(at(60), RunStatus.FAILED, latency_bucket(2), 1),
        ActivityCount(at(120), RunStatus.COMPLETED, latency_bucket(120), 1),
    ]
    assert await store.run_activity(at(131), at(3600)) == []
    earlier = await store.run_activity(at(-3600), at(5))
    assert sorted(earlier, key=lambda c: c.status or "") == [
        ActivityCount(at(-120), None, None, 1),
        ActivityCount(at(-120), RunStatus.COMPLETED, latency_bucket(30), 1),
    ]


async def test_run_activity_counts_the_runs_of_the_namespace_asked_for(store: Store) -> None:
    await create(
        store,
        spec("e1", namespace="eu", created=5),
        spec("e2", namespace="eu", created=6),
        spec("u1", namespace="us", created=7),
        spec("n1", created=8),
    )
    await settle(store, "e1", now=at(10))
    await settle(store, "u1", now=at(10))

    async def counted(namespace: str | None) -> list[ActivityCount]:
        found = await store.run_activity(T0, at(3600), namespace)
        return sorted(found, key=lambda c: c.status or "")

    assert await counted("eu") == [
        ActivityCount(at(0), None, None, 2),
        ActivityCount(at(0), RunStatus.COMPLETED, latency_bucket(5), 1),
    ]
    assert await counted("us") == [
        ActivityCount(at(0), None, None, 1),
        ActivityCount(at(0), RunStatus.COMPLETED, latency_bucket(3), 1),
    ]
    assert await counted("asia") == []
    assert (await counted(None))[0] == ActivityCount(at(0), None, None, 4)


async def test_lane_runs_are_the_active_gated_runs_oldest_first(store: Store) -> None:
    quota = QuotaGate("tenant:a", 5)
    await create(
        store,
        spec("holder", created=1, singleton=key()),
        spec("waiter", created=2, singleton=key()),
        spec("quota", created=0, quota=quota),
        spec("plain", created=0),
        spec("done", created=3, quota=quota),
    )
    await lease(store, "holder")
    await settle(store, "done")
    assert [r.id for r in await store.lane_runs()] == ["quota", "holder", "waiter"]


async def test_lane_runs_of_one_lane_are_its_active_runs_only(store: Store) -> None:
    quota = QuotaGate("tenant:a", 5)
    await create(
        store,
        spec("holder", created=1, singleton=key(), quota=quota),
        spec("waiter", created=2, singleton=key()),
        spec("other", created=0, singleton=SingletonGate("k2", 1, retry=0.0)),
        spec("tenant", created=3, quota=quota),
        spec("done", created=0.5, singleton=key()),
    )
    await settle(store, "done")  # first in line: it held the slot and left
    await lease(store, "holder")
    assert [r.id for r in await store.lane_runs("k")] == ["holder", "waiter"]
    assert [r.id for r in await store.lane_runs("tenant:a")] == ["holder", "tenant"]
    assert await store.lane_runs("nobody") == []


async def test_lane_members_count_each_lane_and_list_its_first_runs(store: Store) -> None:
    running_only = QuotaGate("tenant:a", 5, frozenset({RunStatus.RUNNING}))
    await create(
        store,
        spec("h", created=1, singleton=key()),
        spec("w1", created=2, singleton=key()),
        spec("w2", created=3, singleton=key()),
        spec("w3", created=4, singleton=key()),
        spec("q1", created=5, quota=running_only),
        spec("q2", created=6, quota=running_only),
        spec("eu", created=7, singleton=SingletonGate("k2", 2, retry=0.0), namespace="eu"),
        spec("plain", created=0),
    )
    await lease(store, "h")
    await lease(store, "q1")
    found = {(m.kind, m.run_id): m for m in await store.lane_members(2)}
    assert sorted(found) == [
        ("concurrency", "q1"),
        ("concurrency", "q2"),
        ("singleton", "eu"),
        ("singleton", "h"),
        ("singleton", "w1"),
        ("singleton", "w2"),  # w3 is the third waiter: counted, not listed
    ]
    h, w1, w2 = found["singleton", "h"], found["singleton", "w1"], found["singleton", "w2"]
    assert (h.name, h.holds, h.place, h.of, h.limit) == ("k", True, 1, 1, 1)
    assert (w1.holds, w1.place, w1.of) == (False, 1, 3)
    assert (w2.holds, w2.place, w2.of, w2.workflow) == (False, 2, 3, "wf")
    assert (w2.status, w2.created_at) == ((await run_of(store, "w2")).status, at(3))
    q1, q2 = found["concurrency", "q1"], found["concurrency", "q2"]
    assert (q1.name, q1.holds, q1.of, q1.limit) == ("tenant:a", True, 1, 5)
    assert (q2.holds, q2.place, q2.of) == (False, 1, 1)  # pending: the quota does not count it
    assert [m.run_id for m in await store.lane_members(2, "eu")] == ["eu"]
    assert await store.lane_members(2, "us") == []


async def test_lane_members_of_one_key_are_its_lanes_counted_whole(store: Store) -> None:
    def gate(stored: str) -> SingletonGate:
        return SingletonGate(stored, 1, retry=0.0)

    quota = QuotaGate("k", 5, frozenset({RunStatus.RUNNING}))
    await create(
        store,
        spec("a1", created=1, singleton=gate("2:wf:k")),
        spec("a2", created=2, singleton=gate("2:wf:k")),
        spec("a3", created=3, singleton=gate("2:wf:k")),
        spec("other-wf", created=4, singleton=gate("5:other:k")),
        spec("global", created=5, singleton=gate("*:k")),
        spec("eu", created=6, singleton=gate("~2:eu:2:wf:k"), namespace="eu"),
        # Stored keys that end in ":k" without being shown as "k".
        spec("colon", created=7, singleton=gate("2:wf:x:k")),
        spec("wf-named-k", created=8, singleton=gate("1:k:key")),
        spec("quota", created=9, quota=quota),
        spec("eu-quota", created=10, quota=replace(quota, key="~2:eu:k"), namespace="eu"),
        spec("quota-colon", created=11, quota=replace(quota, key="tenant:k")),
    )
    await lease(store, "a1")
    whole = await store.lane_members(2)
    found = await store.lane_members(2, key="k")
    # The same members, counted the same, as the whole overview gives those lanes.
    assert sorted(found, key=lambda m: m.run_id) == sorted(
        (m for m in whole if m.run_id in {"a1", "a2", "a3", "other-wf", "global", "eu",
                                          "quota", "eu-quota"}),
        key=lambda m: m.run_id,
    )  # fmt: skip
    assert {m.run_id for m in found} == {
        "a1", "a2", "a3", "other-wf", "global", "eu", "quota", "eu-quota"
    }  # fmt: skip
    a3 = next(m for m in found if m.run_id == "a3")
    assert (a3.holds, a3.place, a3.of) == (False, 2, 2)
    assert {m.run_id for m in await store.lane_members(2, "eu", "k")} == {"eu", "eu-quota"}
    assert {m.run_id for m in await store.lane_members(2, key="x:k")} == {"colon"}
    assert {m.run_id for m in await store.lane_members(2, key="tenant:k")} == {"quota-colon"}
    assert await store.lane_members(2, key="nobody") == []


async def test_list_steps_of_an_unknown_run_is_empty(store: Store) -> None:
    assert await store.list_steps("unknown") == []


async def test_get_step_returns_the_record_at_seq_or_none(store: Store) -> None:
    await create(store, spec("a"))
    await suspend(store, "a", None, writes=Writes(steps=[step("a", 1), remote("a", 2)]))
    assert await store.get_step("a", 2) == remote("a", 2)
    assert await store.get_step("a", 3) is None
    assert await store.get_step("unknown", 1) is None


async def test_step_records_round_trip_every_field(store: Store) -> None:
    await create(store, spec("a"))
    record = StepRecord(
        run_id="a",
        seq=4,
        name="charge",
        kind=StepKind.STEP,
        status=StepStatus.FAILED,
        input={"amount": 3},
        output=None,
        error={"type": "Boom", "message": "no"},
        attempts=2,
        started_at=at(1),
        finished_at=at(2),
        last_heartbeat_at=at(1.5),
        wake_at=at(10),
        dispatches=3,
    )
    await suspend(store, "a", None, writes=Writes(steps=[record]))
    assert await store.list_steps("a") == [record]


# ---------------------------------------------------------------- schedules


def schedule_row(schedule_id: str = "s", *, window: float = 60, paused: bool = False) -> Any:
    from runlane.models import StoredSchedule

    return StoredSchedule(
        id=schedule_id,
        definition={"workflow": "wf", "every": 60},
        paused=paused,
        next_window_at=None if paused else at(window),
        next_fire_at=None if paused else at(window + 1),
        created_at=T0,
        updated_at=T0,
    )


async def test_a_schedule_is_saved_read_listed_and_deleted(store: Store) -> None:
    saved = await store.save_schedule(schedule_row("b"))
    await store.save_schedule(schedule_row("a", paused=True))
    assert saved == schedule_row("b")
    assert await store.get_schedule("b") == saved
    assert [s.id for s in await store.list_schedules()] == ["a", "b"]
    assert await store.get_schedule("nope") is None
    assert await store.delete_schedule("b") is True
    assert await store.delete_schedule("b") is False
    assert [s.id for s in await store.list_schedules()] == ["a"]


async def test_saving_again_keeps_the_creation_time_and_the_last_fire(store: Store) -> None:
    await store.save_schedule(schedule_row())
    spec_ = spec("sched:s:1")
    await store.fire_schedule(
        "s", expected=at(60), next_window=at(120), next_fire=at(121), specs=[spec_],
        now=at(61), window=at(60),
    )  # fmt: skip
    again = replace(schedule_row(), definition={"workflow": "wf", "every": 30}, updated_at=at(99))
    again = replace(again, created_at=at(99), next_window_at=at(90), next_fire_at=at(90))
    saved = await store.save_schedule(again)
    assert (saved.created_at, saved.updated_at, saved.definition["every"]) == (T0, at(99), 30)
    assert (saved.last_fire_at, saved.last_run_id, saved.next_window_at) == (
        at(61),
        "sched:s:1",
        at(90),
    )


async def test_only_due_schedules_not_paused_are_due_earliest_first(store: Store) -> None:
    await store.save_schedule(schedule_row("late", window=100))
    await store.save_schedule(schedule_row("early", window=50))
    await store.save_schedule(schedule_row("paused", paused=True))
    await store.save_schedule(schedule_row("future", window=1000))
    assert [s.id for s in await store.due_schedules(at(200), 10)] == ["early", "late"]
    assert [s.id for s in await store.due_schedules(at(200), 1)] == ["early"]
    assert await store.due_schedules(at(10), 10) == []


async def test_firing_a_window_is_a_compare_and_set_with_the_runs_it_creates(
    store: Store,
) -> None:
    await store.save_schedule(schedule_row())
    fire = {"next_window": at(120), "next_fire": at(121), "now": at(61), "window": at(60)}
    started = await store.fire_schedule("s", expected=at(60), specs=[spec("w1")], **fire)
    assert started is not None and started[0].created
    # A second engine firing the same window finds it fired: nothing written.
    assert await store.fire_schedule("s", expected=at(60), specs=[spec("w1b")], **fire) is None
    assert await store.get_run("w1b") is None
    row = await store.get_schedule("s")
    assert row is not None
    assert (row.next_window_at, row.next_fire_at, row.last_fire_at) == (at(120), at(121), at(61))
    assert (row.last_run_id, row.last_error) == ("w1", None)
    # A paused schedule fires nothing.
    await store.save_schedule(replace(row, paused=True, next_window_at=None, next_fire_at=None))
    assert await store.fire_schedule("s", expected=at(120), specs=[spec("w2")], **fire) is None


async def test_a_window_refused_by_its_quota_records_the_refusal(store: Store) -> None:
    quota = QuotaGate("tenant", 1)
    await create(store, spec("occupant", quota=quota))
    await store.save_schedule(schedule_row())
    started = await store.fire_schedule(
        "s", expected=at(60), next_window=at(120), next_fire=at(120),
        specs=[spec("refused", quota=quota)], now=at(61), window=at(60),
    )  # fmt: skip
    assert started is not None and isinstance(started[0].rejected, ConcurrencyLimitError)
    row = await store.get_schedule("s")
    assert row is not None and row.next_window_at == at(120)  # the next window fires as usual
    assert row.last_error is not None
    assert {k: row.last_error[k] for k in ("type", "key", "limit", "active", "window")} == {
        "type": "ConcurrencyLimitError",
        "key": "tenant",
        "limit": 1,
        "active": 1,
        "window": at(60).isoformat(),
    }


def window_fire(schedule_id: str, *, expected: float = 60, run: str | None = None) -> WindowFire:
    """A fire of ``schedule_id``'s window at ``expected`` on to the next minute, with the run
    ``run`` (None: no run, the schedule only moves on)."""
    return WindowFire(
        schedule_id,
        expected=at(expected),
        next_window=at(expected + 60),
        next_fire=at(expected + 61),
        spec=None if run is None else spec(run),
        window=at(expected) if run is not None else None,
    )


async def test_firing_windows_in_a_batch_is_a_compare_and_set_per_schedule(
    store: Store,
) -> None:
    for schedule_id in ("a", "b", "c"):
        await store.save_schedule(schedule_row(schedule_id))
    await store.save_schedule(schedule_row("paused", paused=True))
    fires = [
        window_fire("a", run="sched:a:1"),
        window_fire("b", expected=0, run="sched:b:1"),  # the window it awaits is another
        window_fire("c"),  # nothing to start: it only moves on
        window_fire("paused", run="sched:paused:1"),
        window_fire("missing", run="sched:missing:1"),
    ]
    results = await store.fire_windows(fires, at(61))
    assert [None if r is None else [s.created for s in r] for r in results] == [
        [True],
        None,
        [],
        None,
        None,
    ]
    assert results[0] is not None and results[0][0].run is not None
    assert (results[0][0].run.id, results[0][0].run.status) == ("sched:a:1", RunStatus.PENDING)
    assert results[0][0].run == await store.get_run("sched:a:1")  # the run as stored
    for absent in ("sched:b:1", "sched:paused:1", "sched:missing:1"):
        assert await store.get_run(absent) is None
    a, b, c = [await store.get_schedule(i) for i in ("a", "b", "c")]
    assert a is not None and b is not None and c is not None
    assert (a.next_window_at, a.next_fire_at, a.last_fire_at) == (at(120), at(121), at(61))
    assert (a.last_run_id, a.last_error) == ("sched:a:1", None)
    assert (b.next_window_at, b.last_fire_at, b.last_run_id) == (at(60), None, None)
    assert (c.next_window_at, c.last_fire_at, c.last_run_id) == (at(120), at(61), None)
    # The same batch again: every compare fails, nothing is written.
    assert await store.fire_windows(fires, at(62)) == [None] * 5
    assert await store.fire_windows([], at(62)) == []


async def test_a_window_whose_run_exists_is_found_not_created_again(store: Store) -> None:
    [existing] = await create(store, spec("sched:a:1"))
    await store.save_schedule(schedule_row("a"))
    [result] = await store.fire_windows([window_fire("a", run="sched:a:1")], at(61))
    assert result is not None and [(s.run, s.created) for s in result] == [(existing, False)]
    row = await store.get_schedule("a")
    assert row is not None and (row.next_window_at, row.last_run_id) == (at(120), "sched:a:1")


async def test_two_engines_firing_the_same_due_batch_start_each_window_once(
    store: Store, make_store: Callable[[], Store]
) -> None:
    ids = [f"s{i:02d}" for i in range(20)]
    for schedule_id in ids:
        await store.save_schedule(schedule_row(schedule_id))
    other = make_store()
    await other.open()
    try:
        # A second object that does not see the first's schedules (an in-memory store) is a
        # backend of its own: two engines would share one object of it instead.
        racer = other if await other.get_schedule(ids[0]) is not None else store
        fires = [window_fire(i, run=f"sched:{i}:1") for i in ids]
        # The second engine sees the batch in another order: the stores lock in id order.
        mine, theirs = await asyncio.gather(
            store.fire_windows(fires, at(61)), racer.fire_windows(fires[::-1], at(61))
        )
    finally:
        await other.close()
    for i, schedule_id in enumerate(ids):
        won = [r for r in (mine[i], theirs[len(ids) - 1 - i]) if r is not None]
        assert len(won) == 1, (schedule_id, mine[i], theirs[len(ids) - 1 - i])
        assert [s.created for s in won[0]] == [True]
    runs = await store.list_runs(limit=100)
    assert sorted(r.id for r in runs) == sorted(f"sched:{i}:1" for i in ids)


async def test_a_batch_with_gated_runs_applies_each_gate_and_records_a_refusal(
    store: Store,
) -> None:
    quota = QuotaGate("tenant", 1)
    await create(store, spec("occupant", quota=quota))
    await store.save_schedule(schedule_row("a"))
    await store.save_schedule(schedule_row("b"))
    refused = replace(window_fire("a", run="sched:a:1"), spec=spec("sched:a:1", quota=quota))
    plain = window_fire("b", run="sched:b:1")
    [a, b] = await store.fire_windows([refused, plain], at(61))
    assert a is not None and isinstance(a[0].rejected, ConcurrencyLimitError)
    assert b is not None and b[0].created
    assert await store.get_run("sched:a:1") is None
    row_a, row_b = await store.get_schedule("a"), await store.get_schedule("b")
    assert row_a is not None and row_b is not None
    assert row_a.next_window_at == at(120) and row_a.last_run_id is None
    assert row_a.last_error is not None
    assert (row_a.last_error["type"], row_a.last_error["window"]) == (
        "ConcurrencyLimitError",
        at(60).isoformat(),
    )
    assert (row_b.last_run_id, row_b.last_error) == ("sched:b:1", None)


# ---------------------------------------------------------------- step queues

QUEUE_RETRY = RetryTimer(2.0, 60.0)


async def queued(store: Store, *run_ids: str, now: datetime = T0) -> None:
    """Create these runs and lease each to ``owner-<id>``, as turns asking a queue would be."""
    await create(store, *(spec(run_id) for run_id in run_ids), now=now)
    for run_id in run_ids:
        await lease(store, run_id, owner=f"owner-{run_id}", now=now)


async def ask(
    store: Store,
    run_id: str,
    seq: int = 1,
    *,
    queue: str = "q",
    priority: int = 0,
    key: str | None = None,
    now: datetime = T0,
    writes: Writes | None = None,
) -> Any:
    request = QueueRequest(queue, seq, priority, key if key is not None else run_id)
    owner = f"owner-{run_id}"
    return await store.admit_step(run_id, owner, writes or Writes(), request, now, QUEUE_RETRY)


async def done(store: Store, run_id: str, seq: int = 1, *, now: datetime = T0) -> list[str]:
    """The attempt at ``seq`` recorded, its slot released."""
    writes = Writes((step(run_id, seq, input=None, attempts=1, started_at=now),))
    return await store.release_steps(run_id, f"owner-{run_id}", writes, [seq], now)


async def test_an_unregistered_queue_raises_definition_error(store: Store) -> None:
    await queued(store, "a")
    with pytest.raises(DefinitionError, match="'nowhere' is not registered"):
        await ask(store, "a", queue="nowhere")
    assert not (await run_of(store, "a")).queued


async def test_admission_holds_concurrency_and_wakes_the_next_on_release(store: Store) -> None:
    await store.register_queues([QueueSettings("q", concurrency=2)], T0)
    await queued(store, "a", "b", "c")
    assert (await ask(store, "a", writes=Writes((step("a", 0),)))).admitted
    assert [s.seq for s in await store.list_steps("a")] == [0]  # flushed in the same write
    assert (await ask(store, "b")).admitted
    denied = await ask(store, "c")
    assert not denied.admitted and denied.retry_at == T0 + timedelta(seconds=16)
    assert (await run_of(store, "a")).queued
    again = await ask(store, "c", now=at(1))  # the fallback timer doubles
    assert again.retry_at == at(1) + timedelta(seconds=32)
    assert (await ask(store, "a")).admitted  # an entry holding a slot is admitted again
    await store.suspend_run("c", "owner-c", Writes(), at(60), T0)
    assert await done(store, "a") == ["c"]
    assert (await run_of(store, "c")).wake_at == T0  # woken in the releasing write
    await lease(store, "c", owner="owner-c")
    assert (await ask(store, "c")).admitted
    assert await store.get_step("a", 1) is not None


async def test_a_slot_freed_before_the_denied_waiter_suspends_leaves_it_due(
    store: Store,
) -> None:
    """The release comes between the waiter's denial and its suspension (its turn is still
    out): the wake is kept, so the waiter does not sleep on its fallback timer."""
    await store.register_queues([QueueSettings("q", concurrency=1)], T0)
    await queued(store, "a", "b")
    assert (await ask(store, "a")).admitted
    denied = await ask(store, "b")
    assert not denied.admitted and denied.retry_at is not None and denied.retry_at > at(1)
    assert await done(store, "a", now=at(1)) == ["b"]
    assert await store.suspend_run("b", "owner-b", Writes(), denied.retry_at, at(1))
    assert (await run_of(store, "b")).wake_at == at(1)


async def test_order_is_priority_then_arrival_and_lifo_reverses_arrival(store: Store) -> None:
    await store.register_queues(
        [QueueSettings("q", concurrency=1), QueueSettings("l", concurrency=1, order="lifo")], T0
    )
    await queued(store, "h", "x", "y", "z", "p")
    for queue in ("q", "l"):
        assert (await ask(store, "h", queue=queue, seq=1 if queue == "q" else 2)).admitted
        for n, run_id in enumerate(("x", "y", "z")):
            denied = await ask(store, run_id, queue=queue, seq=1 if queue == "q" else 2)
            assert not denied.admitted, n
    assert not (await ask(store, "p", queue="q", priority=9)).admitted
    await store.suspend_run("p", "owner-p", Writes(), None, T0)
    assert await done(store, "h", 1) == ["p"]  # the highest priority
    assert await done(store, "h", 2) == ["z"]  # the newest (lifo)


async def test_fairness_serves_the_key_served_least_recently(store: Store) -> None:
    await store.register_queues([QueueSettings("q", concurrency=1, fairness="key")], T0)
    await queued(store, "a1", "a2", "b1")
    assert (await ask(store, "a1", key="A")).admitted
    assert not (await ask(store, "a2", key="A")).admitted
    assert not (await ask(store, "b1", key="B")).admitted
    assert await done(store, "a1") == ["b1"]  # B was never served; A just was


async def test_a_used_up_rate_window_waits_for_the_next(store: Store) -> None:
    await store.register_queues([QueueSettings("q", rate_limit=2, rate_period=60.0)], at(10))
    await queued(store, "a", "b", "c")
    assert (await ask(store, "a", now=at(10))).admitted
    assert (await ask(store, "b", now=at(20))).admitted
    denied = await ask(store, "c", now=at(30))
    assert not denied.admitted and denied.retry_at == at(60)  # the next window's start
    assert await done(store, "a", now=at(31)) == []  # no room: the window is used up
    assert (await ask(store, "c", now=at(60))).admitted
    # Registering again changes the numbers, not the window already counted.
    await store.register_queues([QueueSettings("q", rate_limit=1, rate_period=60.0)], at(61))
    await queued(store, "d")
    assert not (await ask(store, "d", now=at(62))).admitted


async def test_settling_a_run_releases_its_entries_and_wakes_the_next(store: Store) -> None:
    await store.register_queues([QueueSettings("q", concurrency=1)], T0)
    await queued(store, "a", "b")
    assert (await ask(store, "a")).admitted
    assert not (await ask(store, "b")).admitted
    await store.suspend_run("b", "owner-b", Writes(), at(60), T0)
    result = await store.settle_run("a", "owner-a", Writes(), DONE, T0)
    assert "b" in result.woken
    await lease(store, "b", owner="owner-b")
    assert (await ask(store, "b")).admitted


async def test_a_cancelled_holder_frees_its_slot(store: Store) -> None:
    await store.register_queues([QueueSettings("q", concurrency=1)], T0)
    await queued(store, "a", "b")
    assert (await ask(store, "a")).admitted
    await store.suspend_run("a", "owner-a", Writes(), None, T0)  # e.g. a remote step out
    assert not (await ask(store, "b")).admitted
    assert (await store.cancel_run("a", T0, None)).changed == ["a"]
    assert (await ask(store, "b")).admitted


async def test_a_recovered_run_gives_back_its_slots_and_asks_again(store: Store) -> None:
    await store.register_queues([QueueSettings("q", concurrency=1)], T0)
    await queued(store, "a", "b")
    assert (await ask(store, "a")).admitted
    assert not (await ask(store, "b")).admitted
    await store.suspend_run("b", "owner-b", Writes(), at(600), T0)
    expired = T0 + LEASE + timedelta(seconds=1)
    outcome = await claim(store, "a", owner="owner-a", now=expired)  # a recovery
    assert outcome.claim is not None and outcome.claim.run.recoveries == 1
    assert (await run_of(store, "b")).wake_at == expired  # the freed slot woke the waiter
    await lease(store, "b", owner="owner-b", now=expired)
    assert (await ask(store, "b", now=expired)).admitted
    assert not (await ask(store, "a", now=expired)).admitted  # a asks again, behind b


async def test_a_workers_result_releases_the_remote_steps_slot(store: Store) -> None:
    await store.register_queues([QueueSettings("q", concurrency=1)], T0)
    await queued(store, "a", "b")
    assert (await ask(store, "a")).admitted
    running = step("a", 1, StepStatus.RUNNING, attempts=1, input=None)
    await store.suspend_run("a", "owner-a", Writes((running,)), None, T0)
    assert not (await ask(store, "b")).admitted
    await store.suspend_run("b", "owner-b", Writes(), at(600), T0)
    assert await store.record_step_result("a", 1, 1, True, "out", None, at(1)) == "recorded"
    assert (await run_of(store, "b")).wake_at == at(1)
    await lease(store, "b", owner="owner-b", now=at(1))
    assert (await ask(store, "b", now=at(1))).admitted


async def test_a_lost_lease_cannot_ask_or_release(store: Store) -> None:
    await store.register_queues([QueueSettings("q", concurrency=1)], T0)
    await queued(store, "a")
    with pytest.raises(LeaseLostError):
        await store.admit_step(
            "a", "someone-else", Writes(), QueueRequest("q", 1, 0, "a"), T0, QUEUE_RETRY
        )
    with pytest.raises(LeaseLostError):
        await store.release_steps("a", "someone-else", Writes(), [1], T0)
    assert (await ask(store, "a")).admitted  # nothing was taken by the failed calls


# ---------------------------------------------------------------- retention


def every_status_before(when: datetime) -> dict[RunStatus, datetime]:
    return {
        status: when
        for status in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.DEAD)
    }


async def test_prune_deletes_settled_runs_past_their_cutoff_with_steps_and_signals(
    store: Store,
) -> None:
    await create(store, spec("old"), spec("new"), spec("busy"))
    await store.deliver_signal("old", "go", {"n": 1}, T0)
    await lease(store, "old")
    await store.settle_run("old", "owner-1", Writes(steps=[step("old", 1)]), DONE, at(10))
    await settle(store, "new", now=at(100))
    assert await store.prune_runs(every_status_before(at(50)), 10) == ["old"]
    assert await store.get_run("old") is None
    assert await store.list_steps("old") == []
    assert {r.id for r in await store.list_runs()} == {"new", "busy"}
    # The id starts clean if it is used again: nothing of the old run's was left behind.
    await create(store, spec("old"))
    claimed = (await claim(store, "old", now=at(60))).claim
    assert claimed is not None and claimed.signals == [] and claimed.steps == []


async def test_prune_honours_each_statuss_cutoff_and_ignores_active_statuses(
    store: Store,
) -> None:
    await create(store, spec("done"), spec("failed"), spec("pending"))
    await settle(store, "done", now=at(10))
    await settle(store, "failed", Settlement(RunStatus.FAILED, error={"m": "x"}), now=at(10))
    cutoffs = {RunStatus.FAILED: at(50), RunStatus.COMPLETED: at(5), RunStatus.PENDING: at(99)}
    assert await store.prune_runs(cutoffs, 10) == ["failed"]
    assert {r.id for r in await store.list_runs()} == {"done", "pending"}
    assert await store.prune_runs({}, 10) == []


async def test_prune_takes_the_least_recently_updated_first_at_most_limit(store: Store) -> None:
    await create(store, *(spec(i) for i in "abcd"))
    for n, run_id in enumerate("dbca"):
        await settle(store, run_id, now=at(n))
    cutoffs = every_status_before(at(60))
    assert await store.prune_runs(cutoffs, 2) == ["d", "b"]
    assert await store.prune_runs(cutoffs, 2) == ["c", "a"]
    assert await store.prune_runs(cutoffs, 2) == []


async def test_a_parent_is_kept_until_its_children_settle_and_they_are_not_deleted_with_it(
    store: Store,
) -> None:
    await create(store, spec("parent"), spec("kid", parent_id="parent"))
    await create(store, spec("done-kid", parent_id="parent"))
    await settle(store, "done-kid", now=at(1))
    await settle(store, "parent", now=at(2))
    cutoffs = {RunStatus.COMPLETED: at(5)}
    assert await store.prune_runs(cutoffs, 10) == ["done-kid"]
    assert await status_of(store, "parent") == RunStatus.COMPLETED
    await settle(store, "kid", now=at(3))
    assert await store.prune_runs(cutoffs, 10) == ["parent", "kid"]


async def test_prune_events_deletes_old_events_oldest_first_in_batches_and_keeps_the_newest(
    store: Store,
) -> None:
    for n in range(5):
        await store.publish_event("paid" if n % 2 else "shipped", n, f"evt-{n}", at(n))
    assert await store.prune_events(at(3), 2) == 2  # seqs 1 and 2
    assert await store.prune_events(at(3), 2) == 1  # seq 3; the one of at(3) is not before it
    assert await store.prune_events(at(3), 2) == 0
    assert [e.payload for e in await store.events_after("paid", 0, 10)] == [3]
    assert [e.payload for e in await store.events_after("shipped", 0, 10)] == [4]
    # Everything is old now: all but the newest go, and the latest seq stays.
    assert await store.prune_events(at(99), 10) == 1
    assert await store.latest_event_seq() == 5
    assert [e.seq for e in await store.events_after("shipped", 0, 10)] == [5]
    # A deleted event's id no longer deduplicates; a new event never reuses a seq.
    event, created, _ = await store.publish_event("paid", "again", "evt-1", at(100))
    assert created and event.seq == 6
    assert await store.prune_events(at(0), 10) == 0


async def test_prune_events_keeps_what_a_pending_event_wait_may_still_read(store: Store) -> None:
    for n in range(4):
        await store.publish_event("paid", n, None, at(n))  # seqs 1 to 4
    await create(store, spec("waiter"))
    waits = step(
        "waiter", 1, StepStatus.PENDING, name="paid", kind=StepKind.EVENT, input={"after": 2}
    )
    await suspend(store, "waiter", writes=Writes(steps=[waits]))
    assert await store.prune_events(at(99), 10) == 2  # seqs 1 and 2: the wait reads after 2
    assert [e.seq for e in await store.events_after("paid", 2, 10)] == [3, 4]
    await store.cancel_run("waiter", at(99), None)  # a settled run's wait keeps nothing
    assert await store.prune_events(at(99), 10) == 1
    assert [e.seq for e in await store.events_after("paid", 0, 10)] == [4]


async def test_queue_views_show_holders_and_waiters_in_admission_order(store: Store) -> None:
    rate = QueueSettings("r", rate_limit=5, rate_period=60.0)
    await store.register_queues([QueueSettings("q", concurrency=1), rate], T0)
    await queued(store, "h", "x", "y", "gone")
    assert (await ask(store, "h")).admitted
    for run_id, priority in (("x", 0), ("y", 5), ("gone", 9)):
        assert not (await ask(store, run_id, priority=priority)).admitted
    assert (await ask(store, "x", queue="r", seq=2, now=at(1))).admitted
    await store.settle_run("gone", "owner-gone", Writes(), DONE, at(2), queued=True)
    [q, r] = await store.queue_views()
    assert (q.row.settings.concurrency, r.row.settings.rate_limit) == (1, 5)
    assert [(e.run_id, e.admitted_at) for e in q.holders()] == [("h", T0)]
    assert [e.run_id for e in q.waiters()] == ["y", "x"]  # priority first; settled runs gone
    assert [e.run_id for e in r.holders()] == ["x"]
    assert (r.row.window_count, r.row.window_start) == (1, T0)


async def test_active_run_counts_are_by_workflow_and_status_without_settled_runs(
    store: Store,
) -> None:
    await create(store, spec("a"), spec("b"), spec("c", workflow="other"), spec("d"))
    await lease(store, "b")
    await settle(store, "d")
    assert await store.active_run_counts() == {
        ("wf", RunStatus.PENDING): 1,
        ("wf", RunStatus.RUNNING): 1,
        ("other", RunStatus.PENDING): 1,
    }


async def test_active_run_counts_keep_the_namespace_asked_for(store: Store) -> None:
    await create(
        store,
        spec("e1", namespace="eu"),
        spec("e2", namespace="eu"),
        spec("u1", namespace="us", workflow="other"),
        spec("n1"),
    )
    await lease(store, "e2")
    assert await store.active_run_counts("eu") == {
        ("wf", RunStatus.PENDING): 1,
        ("wf", RunStatus.RUNNING): 1,
    }
    assert await store.active_run_counts("us") == {("other", RunStatus.PENDING): 1}
    assert await store.active_run_counts("asia") == {}
    assert await store.active_run_counts() == {
        ("wf", RunStatus.PENDING): 2,
        ("wf", RunStatus.RUNNING): 1,
        ("other", RunStatus.PENDING): 1,
    }


# ---------------------------------------------------------------- routing by code

V1 = Serves(frozenset({("wf", "1")}))
V2 = Serves(frozenset({("wf", "2")}))
NOTHING = Serves(frozenset())


def v2(run_id: str, **fields: Any) -> RunSpec:
    """A run of version 2 of ``wf`` (an engine serving ``V1`` cannot replay it)."""
    return replace(spec(run_id, **fields), version="2")


async def test_claim_queues_hold_only_the_runs_of_the_codes_served_in_their_order(
    store: Store,
) -> None:
    await create(
        store,
        spec("a", created=3),
        v2("b", created=2),
        spec("c", created=1, workflow="other"),
        spec("d", created=4, priority=2),
    )
    both = Serves(frozenset({("wf", "2"), ("other", "1")}))
    assert await store.pending_run_ids(T0, 10, None, serves=V1) == ["d", "a"]
    assert await store.pending_run_ids(T0, 10, None, serves=both) == ["c", "b"]
    assert await store.pending_run_ids(T0, 1, None, serves=both) == ["c"]
    assert await store.pending_run_ids(T0, 10, None, serves=NOTHING) == []
    assert await store.pending_run_ids(T0, 10, None) == ["d", "c", "b", "a"]


async def test_due_expired_and_timed_out_queues_hold_only_the_codes_served(store: Store) -> None:
    await create(store, spec("s1"), v2("s2"), spec("l1"), v2("l2"))
    await create(store, spec("t1", deadline_at=at(5)), v2("t2", deadline_at=at(5)))
    await suspend(store, "s1", at(1))
    await suspend(store, "s2", at(1))
    await lease(store, "l1")
    await lease(store, "l2")
    assert await store.due_run_ids(at(2), 10, None, serves=V1) == ["s1"]
    assert await store.due_run_ids(at(2), 10, "elsewhere", serves=V2) == []
    assert await store.expired_run_ids(at(31), 10, None, serves=V2) == ["l2"]
    assert await store.timed_out_run_ids(at(5), 10, None, serves=V1) == ["t1"]
    assert await store.timed_out_run_ids(at(5), 10, None, serves=NOTHING) == []


async def test_a_claim_of_a_run_not_served_writes_nothing_and_says_why(store: Store) -> None:
    await create(store, v2("b"))
    assert await claim(store, "b", serves=V1) == ClaimOutcome(unserved=True)
    run = await run_of(store, "b")
    assert (run.status, run.lease_owner, run.recoveries) == (RunStatus.PENDING, None, 0)
    claimed = await claim(store, "b", serves=V2)
    assert claimed.claim is not None and claimed.claim.run.version == "2"
    assert await claim(store, "b", serves=V1) == ClaimOutcome()  # leased now: not claimable


async def test_an_unserved_run_whose_lease_expired_is_never_recovered_nor_made_dead(
    store: Store,
) -> None:
    await create(store, v2("b"), v2("w", singleton=key()), v2("x", created=1, singleton=key()))
    for run_id in ("b", "w"):
        await lease(store, run_id)
    for _ in range(3):  # engines without its code find it again and again
        outcome = await claim(store, "b", now=at(31), max_recoveries=0, serves=V1)
        assert outcome == ClaimOutcome(unserved=True)
    assert await claim(store, "x", now=at(31), serves=V1) == ClaimOutcome(unserved=True)
    run = await run_of(store, "b")
    assert (run.status, run.recoveries, run.lease_owner) == (RunStatus.RUNNING, 0, "owner-1")
    assert (await run_of(store, "x")).admission_retries == 1  # as created: not parked again
    recovered = await claim(store, "b", now=at(31), max_recoveries=2, serves=V2)
    assert recovered.claim is not None and recovered.claim.run.recoveries == 1


async def test_a_settlement_hands_its_slot_only_to_a_waiter_its_successor_serves(
    store: Store,
) -> None:
    gate = key()
    await create(store, spec("holder", singleton=gate), v2("waiter", created=1, singleton=gate))
    await create(store, spec("third", created=2, singleton=gate))
    await lease(store, "holder")
    result = await store.settle_run(
        "holder", "owner-1", Writes(), DONE, at(10), successor=Lease("heir", at(40), V1)
    )
    assert result.successor is None and result.woken == ["waiter"]
    waiter = await run_of(store, "waiter")
    assert waiter.lease_owner is None and not waiter.holds_slot
    handed = await claim(store, "waiter", now=at(11), serves=V2)
    assert handed.claim is not None and handed.claim.run.holds_slot
    result = await store.settle_run(
        "waiter", "owner-1", Writes(), DONE, at(12), successor=Lease("heir", at(40), V1)
    )
    assert result.successor is not None and result.successor.run.id == "third"


async def test_a_decision_is_claimed_only_by_an_engine_that_serves_the_run(
    store: Store,
) -> None:
    await create(store, v2("a"))
    await lease(store, "a")
    await store.await_decision("a", "owner-1", "t1", at(60), T0)
    assert await store.claim_decision("a", "t1", "owner-2", at(1), at(31), serves=V1) is None
    assert (await run_of(store, "a")).awaiting_decision_task_id == "t1"
    claim = await store.claim_decision("a", "t1", "owner-2", at(1), at(31), serves=V2)
    assert claim is not None and claim.run.lease_owner == "owner-2"


async def test_due_runs_are_handed_off_only_by_an_engine_that_serves_them(store: Store) -> None:
    await create(store, spec("a"), v2("b"))
    await suspend(store, "a", at(1))
    await suspend(store, "b", at(1))
    taken = await store.hand_off_due_runs(at(2), 10, None, at(40), serves=V2)
    assert [r.id for r in taken] == ["b"]
    assert (await run_of(store, "a")).wake_at == at(1)


async def test_active_code_counts_are_by_workflow_and_version(store: Store) -> None:
    await create(store, spec("a"), v2("b"), v2("c"), spec("d", workflow="other"), spec("e"))
    await settle(store, "e")
    assert await store.active_code_counts() == {("wf", "1"): 1, ("wf", "2"): 2, ("other", "1"): 1}


async def test_active_code_counts_keep_the_namespace_asked_for(store: Store) -> None:
    await create(store, spec("a", namespace="eu"), v2("b", namespace="eu"), v2("c"), spec("d"))
    assert await store.active_code_counts("eu") == {("wf", "1"): 1, ("wf", "2"): 1}
    assert await store.active_code_counts("us") == {}
    assert await store.active_code_counts() == {("wf", "1"): 2, ("wf", "2"): 2}


# ---------------------------------------------------------------- engines


def engine_info(engine_id: str, *, started: float = 0.0, **fields: Any) -> EngineInfo:
    given: dict[str, Any] = {
        "host": "host-a",
        "pid": 4711,
        "started_at": at(started),
        "last_beat_at": at(started),
        "serves": (("wf", "1"), ("wf", "2")),
        "groups": ("billing",),
        **fields,
    }
    return EngineInfo(id=engine_id, **given)


async def test_an_engine_is_announced_beaten_listed_and_removed(store: Store) -> None:
    await store.announce_engine(engine_info("e2", started=2, namespace="eu", lease=10.0))
    await store.announce_engine(engine_info("e1", started=1, serves=()))
    assert await store.beat_engine("e2", at(5))
    assert not await store.beat_engine("gone", at(5))
    listed = await store.list_engines()
    assert [e.id for e in listed] == ["e1", "e2"]
    assert listed[1] == engine_info("e2", started=2, namespace="eu", lease=10.0, last_beat_at=at(5))
    assert listed[0].serves == ()
    await store.remove_engine("e1")
    await store.remove_engine("e1")  # idempotent
    assert [e.id for e in await store.list_engines()] == ["e2"]


async def test_announcing_again_replaces_the_record(store: Store) -> None:
    await store.announce_engine(engine_info("e1"))
    await store.announce_engine(engine_info("e1", started=9, serves=(("wf", "3"),)))
    [record] = await store.list_engines()
    assert record.serves == (("wf", "3"),) and record.started_at == at(9)


async def test_engines_silent_since_before_a_moment_are_pruned(store: Store) -> None:
    await store.announce_engine(engine_info("old", started=1))
    await store.announce_engine(engine_info("new", started=5))
    assert await store.prune_engines(at(5)) == 1
    assert [e.id for e in await store.list_engines()] == ["new"]


async def test_the_signals_not_consumed_yet_are_listed_oldest_first(store: Store) -> None:
    await create(store, spec("a"))
    await store.deliver_signal("a", "first", 1, T0)
    await store.deliver_signal("a", "second", {"n": 2}, at(1))
    assert [(s.name, s.payload) for s in await store.list_signals("a")] == [
        ("first", 1),
        ("second", {"n": 2}),
    ]
    await lease(store, "a")
    [first, _] = await store.list_signals("a")
    await store.suspend_run("a", "owner-1", Writes(consumed_signals=(first.id,)), None, at(2))
    assert [s.name for s in await store.list_signals("a")] == ["second"]
    assert await store.list_signals("nobody") == []


# ---------------------------------------------------------------- pause and resume


async def test_a_run_no_turn_holds_pauses_at_once_keeping_its_wake_time(store: Store) -> None:
    await create(store, spec("a"))
    await suspend(store, "a", at(10))
    assert await store.pause_run("a", at(1)) is True
    run = await run_of(store, "a")
    assert (run.status, run.wake_at, run.pause_requested_at) == (RunStatus.PAUSED, at(10), None)
    assert await store.due_run_ids(at(20), 10, None) == []
    assert await claim(store, "a", now=at(20)) == ClaimOutcome()
    assert await store.pause_run("a", at(2)) is False  # paused already
    assert await store.resume_run("a", at(30)) is True
    run = await run_of(store, "a")
    assert (run.status, run.wake_at) == (RunStatus.SUSPENDED, at(30))
    assert await store.resume_run("a", at(31)) is False  # not paused
    assert (await lease(store, "a", now=at(30))).status == RunStatus.RUNNING


async def test_a_pending_run_paused_is_not_claimed_until_resumed(store: Store) -> None:
    await create(store, spec("a"))
    assert await store.pause_run("a", T0)
    assert await store.pending_run_ids(at(1), 10, None) == []
    assert await claim(store, "a", now=at(1)) == ClaimOutcome()
    assert await store.resume_run("a", at(2))
    assert await store.due_run_ids(at(2), 10, None) == ["a"]


async def test_pause_and_resume_of_an_unknown_run_raise_and_of_a_finished_one_change_nothing(
    store: Store,
) -> None:
    for control in (store.pause_run, store.resume_run):
        with pytest.raises(RunNotFoundError):
            await control("nobody", T0)
    await create(store, spec("a"))
    await settle(store, "a")
    assert await store.pause_run("a", T0) is False
    assert await store.resume_run("a", T0) is False
    assert await status_of(store, "a") == RunStatus.COMPLETED


async def test_a_leased_run_is_asked_to_pause_and_its_next_checkpoint_says_so_once_written(
    store: Store,
) -> None:
    await create(store, spec("a"))
    await lease(store, "a")
    assert await store.pause_run("a", at(1)) is True
    run = await run_of(store, "a")
    assert (run.status, run.pause_requested_at) == (RunStatus.RUNNING, at(1))
    assert await store.pause_run("a", at(2)) is False  # asked already
    with pytest.raises(RunPausing):
        await store.checkpoint("a", "owner-1", Writes(steps=[step("a", 1)]), at(2))
    assert [s.seq for s in await store.list_steps("a")] == [1]  # the write went through
    assert await store.suspend_run("a", "owner-1", Writes(), at(60), at(3)) is False
    run = await run_of(store, "a")
    assert (run.status, run.pause_requested_at, run.lease_owner) == (RunStatus.PAUSED, None, None)


async def test_a_checkpoint_that_starts_children_reports_them_with_the_pause(store: Store) -> None:
    await create(store, spec("a"))
    await lease(store, "a")
    await store.pause_run("a", at(1))
    writes = Writes(children=[spec("a.child", parent_id="a")])
    with pytest.raises(RunPausing) as pausing:
        await store.checkpoint("a", "owner-1", writes, at(2))
    assert [s.run.id for s in pausing.value.started if s.run is not None] == ["a.child"]
    assert await status_of(store, "a.child") == RunStatus.PENDING


async def test_a_resume_withdraws_a_pause_not_taken_yet(store: Store) -> None:
    await create(store, spec("a"))
    await lease(store, "a")
    await store.pause_run("a", at(1))
    assert await store.resume_run("a", at(2)) is True
    await store.checkpoint("a", "owner-1", Writes(steps=[step("a", 1)]), at(3))
    assert await store.suspend_run("a", "owner-1", Writes(), at(60), at(3)) is False
    assert await status_of(store, "a") == RunStatus.SUSPENDED


async def test_a_settlement_ends_a_run_asked_to_pause(store: Store) -> None:
    await create(store, spec("a"))
    await lease(store, "a")
    await store.pause_run("a", at(1))
    await store.settle_run("a", "owner-1", Writes(), DONE, at(2))
    run = await run_of(store, "a")
    assert (run.status, run.pause_requested_at) == (RunStatus.COMPLETED, None)


async def test_a_claim_of_a_run_asked_to_pause_whose_lease_expired_parks_it_paused(
    store: Store,
) -> None:
    await create(store, spec("a"))
    await lease(store, "a")
    await store.pause_run("a", at(1))
    assert await claim(store, "a", owner="owner-2", now=at(5)) == ClaimOutcome()  # still held
    assert await claim(store, "a", owner="owner-2", now=at(31)) == ClaimOutcome()
    run = await run_of(store, "a")
    assert (run.status, run.lease_owner, run.pause_requested_at) == (RunStatus.PAUSED, None, None)
    assert run.recoveries == 0
    assert await store.resume_run("a", at(40))
    assert (await lease(store, "a", owner="owner-2", now=at(40))).lease_owner == "owner-2"


async def test_a_remote_turn_asked_to_pause_goes_out_as_a_pause(store: Store) -> None:
    await create(store, spec("a"))
    await lease(store, "a")
    await store.pause_run("a", at(1))
    with pytest.raises(RunPausing):
        await store.await_decision("a", "owner-1", "t1", at(60), at(1))
    run = await run_of(store, "a")
    assert (run.status, run.awaiting_decision_task_id) == (RunStatus.PAUSED, None)
    assert await store.claim_decision("a", "t1", "owner-2", at(2), at(32)) is None


async def test_a_run_awaiting_a_decision_is_asked_to_pause_and_its_decision_still_applies(
    store: Store,
) -> None:
    await awaiting(store, "a", "t1")
    assert await store.pause_run("a", at(1))
    run = await run_of(store, "a")
    assert (run.status, run.pause_requested_at) == (RunStatus.SUSPENDED, at(1))
    claimed = await store.claim_decision("a", "t1", "owner-2", at(2), at(32))
    assert claimed is not None
    with pytest.raises(RunPausing):
        await store.checkpoint("a", "owner-2", Writes(steps=[step("a", 1)]), at(3))


async def test_a_run_awaiting_a_decision_asked_to_pause_is_paused_at_its_deadline(
    store: Store,
) -> None:
    await awaiting(store, "a", "t1", deadline=60)
    await store.pause_run("a", at(1))
    assert await claim(store, "a", owner="owner-2", now=at(61)) == ClaimOutcome()
    assert await status_of(store, "a") == RunStatus.PAUSED


async def test_a_paused_holder_keeps_its_slot_and_quota_place(store: Store) -> None:
    quota = QuotaGate("q", limit=1)
    await create(store, spec("a", singleton=key(), quota=quota))
    await create(store, spec("b", created=1, singleton=key()))
    await suspend(store, "a", None)
    assert await store.pause_run("a", at(1))
    assert (await claim(store, "b", now=at(1))).parked
    refused = await store.create_runs([spec("c", created=2, quota=quota)], at(2))
    assert isinstance(refused[0].rejected, ConcurrencyLimitError)


async def test_a_paused_waiter_is_passed_over_and_waits_again_once_resumed(store: Store) -> None:
    await _held_with_two_waiters(store)  # "a" holds; "b" then "c" wait
    assert await store.pause_run("b", at(1))
    assert (await store.settle_run("a", "owner-1", Writes(), DONE, at(2))).woken == ["c"]
    assert (await lease(store, "c", now=at(2))).holds_slot
    assert await store.resume_run("b", at(3))
    b = await run_of(store, "b")
    assert (b.status, b.wake_at) == (RunStatus.BLOCKED, at(3))
    assert (await claim(store, "b", now=at(3))).parked  # "c" holds the slot now


async def test_a_waiter_woken_for_a_slot_and_paused_passes_the_wake_on(store: Store) -> None:
    await _held_with_two_waiters(store)  # "a" holds; "b" then "c" wait
    assert (await store.settle_run("a", "owner-1", Writes(), DONE, at(1))).woken == ["b"]
    assert await store.pause_run("b", at(2))
    c = await run_of(store, "c")
    assert (c.status, c.wake_at) == (RunStatus.BLOCKED, at(2))
    assert (await lease(store, "c", now=at(2))).holds_slot


async def test_cancel_of_a_paused_run_settles_it_and_frees_its_slot(store: Store) -> None:
    await create(store, spec("a", singleton=key()), spec("b", created=1, singleton=key()))
    await suspend(store, "a", None)
    assert (await claim(store, "b")).parked
    await store.pause_run("a", at(1))
    assert await store.cancel_run("a", at(2), None) == CancelResult(["a"], ["b"])
    assert await status_of(store, "a") == RunStatus.CANCELLED
    assert await store.pause_run("a", at(3)) is False


# ---------------------------------------------------------------- fences


async def test_every_claim_of_a_run_takes_its_next_fence(store: Store) -> None:
    await create(store, spec("a"))
    assert (await run_of(store, "a")).fence == 0
    assert (await lease(store, "a")).fence == 1
    await store.suspend_run("a", "owner-1", Writes(), at(5), at(1))
    assert (await run_of(store, "a")).fence == 1  # a turn's writes keep it
    assert (await lease(store, "a", now=at(5))).fence == 2
    recovered = await claim(store, "a", owner="owner-2", now=at(5) + LEASE)
    assert recovered.claim is not None and recovered.claim.run.fence == 3
    await store.settle_run("a", "owner-2", Writes(), Settlement(RunStatus.FAILED), at(40))
    await store.requeue_run("a", at(41), None)
    assert (await run_of(store, "a")).fence == 3  # a requeue keeps it
    assert (await lease(store, "a", now=at(41))).fence == 4


async def test_a_claim_at_creation_a_hand_off_and_a_decision_take_the_next_fence(
    store: Store,
) -> None:
    [started] = await store.create_runs([spec("a")], T0, lease=Lease("owner-1", at(30)))
    assert started.claim is not None and started.claim.run.fence == 1
    await holder_and_waiter(store, "heir")
    result = await store.settle_run(
        "holder", "owner-1", Writes(), DONE, at(10), successor=Lease("heir-owner", at(40))
    )
    assert result.successor is not None and result.successor.run.fence == 1
    assert (await awaiting(store, "r", "t1")).fence == 1
    decided = await store.claim_decision("r", "t1", "owner-2", at(1), at(31))
    assert decided is not None and decided.run.fence == 2


async def test_a_step_record_keeps_the_fence_its_writer_gave_it(store: Store) -> None:
    await dispatched(store, "a", remote("a", fence=7), step("a", 2, fence=6), step("a", 3))
    assert [r.fence for r in await store.list_steps("a")] == [7, 6, None]


async def test_a_result_of_an_older_fence_than_its_records_drops(store: Store) -> None:
    await dispatched(store, "a", remote("a", fence=5))
    steps = await store.list_steps("a")
    assert await store.record_step_result("a", 1, 1, True, "old", None, at(3), fence=4) == "dropped"
    assert await store.list_steps("a") == steps
    assert (await run_of(store, "a")).wake_at is None  # not woken either
    assert await store.record_step_result("a", 1, 1, True, "ok", None, at(4), fence=5) == "recorded"
    assert await store.record_step_result("a", 1, 1, True, "x", None, at(5), fence=4) == "dropped"
    assert await store.record_step_result("a", 1, 1, True, "x", None, at(5)) == "duplicate"


async def test_a_result_without_a_fence_or_for_a_record_without_one_goes_by_attempt(
    store: Store,
) -> None:
    await dispatched(store, "a", remote("a", 1, fence=5), remote("a", 2))
    assert await store.record_step_result("a", 1, 1, True, "v", None, at(3)) == "recorded"
    assert await store.record_step_result("a", 2, 1, True, "w", None, at(3), fence=1) == "recorded"


async def test_a_heartbeat_of_an_older_fence_than_its_records_is_refused(store: Store) -> None:
    await dispatched(store, "a", remote("a", fence=5))
    assert await store.record_heartbeat("a", 1, 1, at(3), fence=4) is False
    assert (await store.get_step("a", 1)) == remote("a", fence=5)
    assert await store.record_heartbeat("a", 1, 1, at(4), fence=5) is True
    assert await store.record_heartbeat("a", 1, 1, at(5)) is True
    assert (await store.get_step("a", 1)) == remote("a", fence=5, last_heartbeat_at=at(5))


# ---------------------------------------------------------------- forks


async def test_a_fork_is_created_with_its_copied_records(store: Store) -> None:
    history = (step("f", 1, output=10), step("f", 2, StepStatus.FAILED, error={"m": "x"}))
    [started] = await store.create_runs(
        [spec("f", history=history, forked_from=("src", 3), singleton=key())], T0
    )
    assert started.created and started.run is not None
    assert started.run.forked_from == ("src", 3)
    assert (await run_of(store, "f")).forked_from == ("src", 3)
    records = await store.list_steps("f")
    assert [(r.seq, r.status, r.output, r.error) for r in records] == [
        (1, StepStatus.COMPLETED, 10, None),
        (2, StepStatus.FAILED, None, {"m": "x"}),
    ]
    claimed = await claim(store, "f")
    assert claimed.claim is not None and [r.seq for r in claimed.claim.steps] == [1, 2]


async def test_a_fork_of_an_existing_id_keeps_that_run_and_its_records(store: Store) -> None:
    await create(store, spec("f"))
    [started] = await store.create_runs([spec("f", history=(step("f", 1),))], T0)
    assert not started.created and await store.list_steps("f") == []
    with pytest.raises(ValueError, match="fork"):
        await store.create_runs(
            [spec("g", history=(step("g", 1),))], T0, lease=Lease("owner-1", at(30))
        )
    assert await store.get_run("g") is None


async def test_a_refused_fork_writes_no_records(store: Store) -> None:
    quota = QuotaGate("q", limit=1)
    await create(store, spec("a", quota=quota))
    [refused] = await store.create_runs([spec("f", quota=quota, history=(step("f", 1),))], T0)
    assert isinstance(refused.rejected, ConcurrencyLimitError)
    assert await store.get_run("f") is None and await store.list_steps("f") == []


# ---------------------------------------------------------------- the audit log


def audit(n: int, namespace: str | None = None, **fields: Any) -> AuditEntry:
    values: dict[str, Any] = {
        "at": T0 + timedelta(seconds=n),
        "actor": "ops",
        "source": "http",
        "action": "cancel",
        "outcome": "ok",
        "run_id": f"r{n}",
        "namespace": namespace,
        "detail": None,
        **fields,
    }
    return AuditEntry(**values)


async def test_an_audit_entry_is_appended_with_a_growing_id_and_read_back_newest_first(
    store: Store,
) -> None:
    assert await store.list_audit(10) == []
    first = await store.append_audit(audit(1, detail="ship"))
    second = await store.append_audit(audit(2, actor="ada", source="cli", outcome="409 conflict"))
    assert 0 < first.id < second.id
    assert first == replace(audit(1, detail="ship"), id=first.id)
    assert await store.list_audit(10) == [second, first]


async def test_the_audit_log_pages_back_from_an_entry_and_by_namespace(store: Store) -> None:
    appended = [await store.append_audit(audit(n, "eu" if n % 2 else None)) for n in range(1, 6)]
    newest = await store.list_audit(2)
    assert [e.run_id for e in newest] == ["r5", "r4"]
    older = await store.list_audit(2, before=newest[-1].id)
    assert [e.run_id for e in older] == ["r3", "r2"]
    assert await store.list_audit(10, before=appended[0].id) == []
    eu = await store.list_audit(10, namespace="eu")
    assert [e.run_id for e in eu] == ["r5", "r3", "r1"]
    assert [e.run_id for e in await store.list_audit(1, before=eu[0].id, namespace="eu")] == ["r3"]


__all__ = export_tests(globals(), "store")
