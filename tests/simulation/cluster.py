"""A deterministic simulation of several engines on one store, driven by Hypothesis.

Three engines share one store (one MemoryStore object, or one SQLite file or PostgreSQL database
reached through a store object per engine, as separate processes would), one ``ManualClock``,
and no background loops: nothing happens unless a rule makes it happen. Hypothesis' stateful
testing chooses the operations (start with or without a run id, signal, cancel, requeue, tick
an engine, advance the clock, jump past the lease, crash an engine mid-turn, deliver a run
message) and their order;
the workload includes steps through step queues (one with two slots, one with a rate limit),
and starts of workflows with a rate limit, a throttle and a debounce, whose outcome the model
computes from the clock;
after each one, invariants that must hold at every instant are checked against the store, and
at the end the cluster is driven to rest and every run is checked against a plain reference
model of what it must have become. A failure prints the shrunk list of operations.

An engine crash cancels its pass mid-turn after a chosen number of event-loop steps and drops
the engine without draining it (its leases are left to expire, as a killed process leaves
them); a fresh engine takes its place on the same store. An outage cuts a chosen store call of
an engine's (a turn's write or read, its give-back, a claim, a lease renewal, a poll), before the
store takes it or after it committed (the outcome-unknown case); like a crash, it may cost a step
one more run, and never anything else (a poll cut twice in a row makes that ``tick()`` raise
``StoreUnavailableError``, as any API call would).

The engines have no transport: every run message is lost, and their ticks' polls of the store
must find all the work anyway. A delivery hands an engine a run message as its run-queue
consumer would (a start, a wake or a handed-off timer), to one engine or to several, or the same
one twice (a duplicate), at any time (a replay of a message long since handled); the engines'
turns then run concurrently, interleaved by a chosen number of event-loop steps between
deliveries. A duplicate or stale message must change nothing: no step runs twice, and no step
after a durable sleep runs before the sleep's wake time (a timer hand-off claims a sleeping run
whatever its wake time, and its replay must suspend it again).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar, cast

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, precondition, rule

import runlane
from runlane import (
    ConcurrencyLimitError,
    Debounce,
    Engine,
    FatalError,
    RateLimit,
    RateLimitError,
    Run,
    RunStatus,
    SingletonQueueFullError,
    StepQueue,
    StoreUnavailableError,
)
from runlane.definitions import as_seconds
from runlane.errors import RunFinishedError
from runlane.models import StepStatus
from runlane.step_queues import window_start
from runlane.stores.base import Store
from runlane.testing import ManualClock
from tests.outages import FlakyStore

LEASE = 30.0
QUOTA_LIMIT = 2
ENGINES = 3

executions: Counter[tuple[str, int]] = Counter()

# The store calls an outage may cut: a turn's writes, reads and give-back, claims, the lease
# loop and the polls of a pass.
OUTAGE_CALLS = [
    "claim_run",
    "checkpoint",
    "admit_step",
    "release_steps",
    "suspend_run",
    "settle_run",
    "renew_leases",
    "hand_off_due_runs",
    "pending_run_ids",
    "due_run_ids",
    "expired_run_ids",
    "timed_out_run_ids",
    "park_full_waiters",
    "get_run",
    "list_steps",
]

# Step queues: two slots for three steps at once; two admissions per fixed 10 s window.
SLOTS = StepQueue("sim.slots", concurrency=2)
METER = StepQueue("sim.meter", rate_limit=RateLimit(limit=2, period=10.0))
QUEUES = {q.name: q for q in (SLOTS, METER)}
# Run-level flow control, per key.
LIMIT = RateLimit(limit=2, period=10.0, key=lambda i: i["key"])
THROTTLE = RateLimit(limit=1, period=5.0, key=lambda i: i["key"], on_limit="delay")
DEBOUNCE = Debounce(key=lambda i: i["key"], period=2.0, max_wait=5.0)


@dataclass(frozen=True)
class QueuedExecution:
    """One execution of a step admitted by a queue: from event-loop moment ``begin`` to
    ``end``, at clock time ``at``; ``token`` is its result."""

    queue: str
    run: str
    seq: int
    begin: int
    end: int
    at: datetime
    token: int


queue_log: list[QueuedExecution] = []
moments = itertools.count()
began: dict[str, datetime] = {}  # the clock when a run executed its first step
worked: dict[tuple[str, int], datetime] = {}  # the clock when a sim.work step first executed
clocks: list[ManualClock] = []  # the running example's clock, for the steps


@runlane.step(name="sim.slow")
async def slow(args: list[Any]) -> int:
    """A step that spans a few event-loop steps, so steps admitted at once overlap."""
    run_id, seq, queue = str(args[0]), int(args[1]), str(args[2])
    executions[(run_id, seq)] += 1
    begin, at = next(moments), clocks[-1].now()
    for _ in range(3):
        await asyncio.sleep(0)
    token = next(moments)
    queue_log.append(QueuedExecution(queue, run_id, seq, begin, next(moments), at, token))
    return token


@runlane.step(name="sim.stamp")
async def stamp(run_id: str) -> None:
    executions[(run_id, 1)] += 1
    began.setdefault(run_id, clocks[-1].now())


@runlane.step(name="sim.work")
async def work(args: list[Any]) -> int:
    executions[(str(args[0]), int(args[1]))] += 1
    worked.setdefault((str(args[0]), int(args[1])), clocks[-1].now())
    return int(args[1])


@runlane.step(name="sim.refuse")
async def refuse(run_id: str) -> None:
    executions[(run_id, 1)] += 1
    raise FatalError("this step always refuses")


@runlane.workflow(name="sim.steps")
async def steps(ctx: runlane.Context, n: int) -> int:
    return sum([await ctx.step(work, [ctx.run_id, seq]) for seq in range(1, n + 1)])


@runlane.workflow(name="sim.sleeper")
async def sleeper(ctx: runlane.Context, seconds: float) -> str:
    await ctx.step(work, [ctx.run_id, 1])
    await ctx.sleep(seconds)
    await ctx.step(work, [ctx.run_id, 3])
    return "slept"


@runlane.workflow(name="sim.waiter")
async def waiter(ctx: runlane.Context, _: Any) -> Any:
    return await ctx.wait_for_signal("go")


@runlane.workflow(name="sim.fails")
async def fails(ctx: runlane.Context, _: Any) -> None:
    await ctx.step(refuse, ctx.run_id)


@runlane.workflow(name="sim.keyed", singleton=runlane.Singleton(key=lambda i: i["key"], limit=1))
async def keyed(ctx: runlane.Context, input: dict[str, Any]) -> str:
    await ctx.step(work, [ctx.run_id, 1])
    await ctx.sleep(input["hold"])
    await ctx.step(work, [ctx.run_id, 3])
    return f"held {input['key']}"


@runlane.workflow(
    name="sim.quota", concurrency=runlane.Concurrency(key="sim:quota", limit=QUOTA_LIMIT)
)
async def quota(ctx: runlane.Context, _: Any) -> Any:
    return await ctx.wait_for_signal("go")


@runlane.workflow(name="sim.queued")
async def queued(ctx: runlane.Context, _: Any) -> int:
    """Three steps at once through the queue of two slots, then one through the metered one."""
    ops = [ctx.step(slow, [ctx.run_id, seq, SLOTS.name], queue=SLOTS.name) for seq in (1, 2, 3)]
    tokens = await ctx.all(ops)
    tokens.append(await ctx.step(slow, [ctx.run_id, 4, METER.name], queue=METER.name))
    return len(tokens)


@runlane.workflow(name="sim.limited", rate_limit=LIMIT)
async def limited(ctx: runlane.Context, input: dict[str, Any]) -> int:
    await ctx.step(stamp, ctx.run_id)
    return int(input["n"])


@runlane.workflow(name="sim.throttled", rate_limit=THROTTLE)
async def throttled(ctx: runlane.Context, input: dict[str, Any]) -> int:
    await ctx.step(stamp, ctx.run_id)
    return int(input["n"])


@runlane.workflow(name="sim.debounced", debounce=DEBOUNCE)
async def debounced(ctx: runlane.Context, input: dict[str, Any]) -> int:
    await ctx.step(stamp, ctx.run_id)
    return int(input["n"])


WORKFLOWS = [steps, sleeper, waiter, fails, keyed, quota, queued, limited, throttled, debounced]
FLOW = ("limited", "throttled", "debounced")
ANY = object()  # an output the model does not know in advance


@dataclass
class Expected:
    """What the reference model says a run must become."""

    kind: str
    input: Any
    signal: Any = None
    signalled: bool = False
    cancelled: bool = False  # a cancel of it returned True (and no requeue since)
    created: datetime | None = None
    begin_at: datetime | None = None  # a throttled or debounced run: when it may begin
    any_output: bool = False  # completes with an output only its run knows (workers' tokens)

    def final(self) -> tuple[RunStatus, Any] | None:
        """The run's status and output once the cluster is at rest (None: either of several;
        ``ANY`` for an output the model does not know)."""
        if self.cancelled:
            return RunStatus.CANCELLED, None
        if self.any_output:
            return RunStatus.COMPLETED, ANY
        if self.kind == "steps":
            return RunStatus.COMPLETED, sum(range(1, self.input + 1))
        if self.kind == "sleeper":
            return RunStatus.COMPLETED, "slept"
        if self.kind == "keyed":
            return RunStatus.COMPLETED, f"held {self.input['key']}"
        if self.kind == "fails":
            return RunStatus.FAILED, None
        if self.kind == "queued":
            return RunStatus.COMPLETED, 4
        if self.kind in FLOW:
            return RunStatus.COMPLETED, self.input["n"]
        if self.signalled:  # waiter, quota
            return RunStatus.COMPLETED, self.signal
        return RunStatus.SUSPENDED, None


@dataclass
class Model:
    runs: dict[str, Expected] = field(default_factory=dict)
    terminal: dict[str, RunStatus] = field(default_factory=dict)  # seen terminal, not requeued
    crashes: int = 0
    requeues: Counter[str] = field(default_factory=Counter)  # run id -> times requeued
    limited: defaultdict[str, list[datetime]] = field(default_factory=lambda: defaultdict(list))
    throttled: defaultdict[str, list[datetime]] = field(default_factory=lambda: defaultdict(list))
    debounced: dict[str, str] = field(default_factory=dict)  # key -> its latest run


KINDS = {
    "steps": (steps, st.integers(1, 4)),
    "sleeper": (sleeper, st.sampled_from([0.5, 5.0, 45.0])),
    "waiter": (waiter, st.none()),
    "fails": (fails, st.none()),
    "keyed": (
        keyed,
        st.fixed_dictionaries(
            {"key": st.sampled_from(["A", "B"]), "hold": st.sampled_from([1.0, 20.0])}
        ),
    ),
    "quota": (quota, st.none()),
    "queued": (queued, st.none()),
    **{
        kind: (workflow, st.fixed_dictionaries({"key": st.sampled_from(["A", "B"])}))
        for kind, workflow in zip(FLOW, (limited, throttled, debounced), strict=True)
    },
}


class Cluster(RuleBasedStateMachine):
    """Engines on one store; subclasses say which store (``open_store``)."""

    store_kind: ClassVar[str] = "memory"
    runs = Bundle("runs")

    def __init__(self) -> None:
        super().__init__()
        executions.clear()
        queue_log.clear()
        began.clear()
        worked.clear()
        self.loop = asyncio.new_event_loop()
        self.clock = ManualClock()
        clocks.append(self.clock)
        self.model = Model()
        self.serial = 0
        self.stores: list[Store] = []
        self.flaky: list[FlakyStore] = []  # every engine's, the replaced ones' too
        self.observer = self.new_store()  # the reads of the checks: a process of its own
        self.stores.append(self.observer)
        self.run(self.observer.open())
        self.engines = [self._engine() for _ in range(ENGINES)]

    # ---------------------------------------------------------------- plumbing

    def new_store(self) -> Store:
        raise NotImplementedError

    def _engine(self) -> Engine:
        store = self.new_store()
        self.stores.append(store)
        flaky = FlakyStore(store)  # the same store; an ``outage`` rule cuts its calls
        self.flaky.append(flaky)
        return Engine(
            cast(Store, flaky),
            workflows=WORKFLOWS,
            queues=list(QUEUES.values()),
            clock=self.clock,
            drive=False,
            lease=LEASE,
            poll_interval=1.0,
        )

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def _tick(self, engine: Engine) -> None:
        # A poll cut twice in a row (two outage rules) raises, as any API call would; the
        # turns of the pass met their outages as the loop's turns do.
        with contextlib.suppress(StoreUnavailableError):
            self.run(engine.tick())

    def teardown(self) -> None:
        try:
            self._come_to_rest()
            self._check_final()
        finally:
            for engine in self.engines:
                self.run(engine.drain(timeout=1))
            for store in self.stores:
                with contextlib.suppress(Exception):
                    self.run(store.close())
            self.loop.close()

    # ---------------------------------------------------------------- operations

    @rule(
        target=runs,
        engine=st.integers(0, ENGINES - 1),
        kind=st.sampled_from(sorted(KINDS)),
        data=st.data(),
        named=st.booleans(),
    )
    def start(self, engine: int, kind: str, data: st.DataObject, named: bool) -> str:
        workflow, inputs = KINDS[kind]
        value: Any = data.draw(inputs)
        self.clock.advance(0.001)  # no two starts at one instant: FIFO ties stay deterministic
        self.serial += 1
        if kind in FLOW:
            value = {**value, "n": self.serial}
        run_id = f"{kind}-{self.serial}" if named else None
        active_quota = self._active_quota() if kind == "quota" else 0
        full = kind == "limited" and self._window_full(value["key"])
        try:
            run = self.run(self.engines[engine].start(workflow, value, run_id=run_id))
        except ConcurrencyLimitError:
            assert active_quota >= QUOTA_LIMIT, "a quota start was refused below the limit"
            return "refused"
        except RateLimitError:
            assert full, f"a start of {value} was refused with room in its window"
            return "refused"
        except SingletonQueueFullError:  # pragma: no cover - the keyed rule sets no depth
            raise AssertionError("no backlog limit is set") from None
        assert kind != "quota" or active_quota < QUOTA_LIMIT, "a quota start went over the limit"
        assert not full, f"a start of {value} went over its rate limit"
        if kind == "debounced" and self._fold(run, value):
            return str(run.id)
        expected = Expected(kind, value, created=self.clock.now())
        self.model.runs[run.id] = expected
        if kind == "limited":
            self.model.limited[value["key"]].append(self.clock.now())
        elif kind == "throttled":
            expected.begin_at = self._throttle_instant(value["key"])
            assert run.rate_at == expected.begin_at, f"{run.id} counted at {run.rate_at}"
        elif kind == "debounced":
            expected.begin_at = self.clock.now() + timedelta(seconds=as_seconds(DEBOUNCE.period))
            assert run.begin_at == expected.begin_at, f"{run.id} begins at {run.begin_at}"
            self.model.debounced[value["key"]] = run.id
        return str(run.id)

    def _window_full(self, key: str) -> bool:
        """Whether the rate limit's sliding window ending now holds ``limit`` starts of key."""
        since = self.clock.now() - timedelta(seconds=as_seconds(LIMIT.period))
        return sum(1 for t in self.model.limited[key] if t > since) >= LIMIT.limit

    def _throttle_instant(self, key: str) -> datetime:
        """A throttled start's instant: now, or ``period`` after the ``limit``-th latest one."""
        given = self.model.throttled[key]
        now = self.clock.now()
        at = now
        if len(given) >= THROTTLE.limit:
            at = max(now, given[-THROTTLE.limit] + timedelta(seconds=as_seconds(THROTTLE.period)))
        given.append(at)
        return at

    def _fold(self, run: Run, value: dict[str, Any]) -> bool:
        """A debounced start: folded into the key's run when that run has not begun (and was
        not cancelled), which must be the run the start returned, begun later."""
        held = self.model.runs.get(self.model.debounced.get(value["key"], ""))
        now = self.clock.now()
        if held is None or held.cancelled or held.begin_at is None or held.begin_at <= now:
            assert run.id not in self.model.runs, f"{value} folded into {run.id}, which began"
            return False
        assert run.id == self.model.debounced[value["key"]], f"{value} made {run.id}"
        assert held.created is not None
        latest = held.created + timedelta(seconds=as_seconds(DEBOUNCE.max_wait or 0))
        period = timedelta(seconds=as_seconds(DEBOUNCE.period))
        held.begin_at, held.input = min(now + period, latest), value
        assert run.begin_at == held.begin_at, f"{run.id} begins at {run.begin_at}"
        return True

    @rule(run_id=runs, engine=st.integers(0, ENGINES - 1), payload=st.integers(0, 9))
    def signal(self, run_id: str, engine: int, payload: int) -> None:
        expected = self.model.runs.get(run_id)
        if expected is None:
            return
        try:
            self.run(self.engines[engine].signal(run_id, "go", payload))
        except RunFinishedError:
            assert run_id in self._terminal_now(), f"{run_id} refused a signal while active"
            return
        if expected.kind in ("waiter", "quota") and not expected.signalled:
            expected.signal, expected.signalled = payload, True

    @rule(run_id=runs, engine=st.integers(0, ENGINES - 1))
    def cancel(self, run_id: str, engine: int) -> None:
        expected = self.model.runs.get(run_id)
        if expected is None:
            return
        before = self._get(run_id)
        assert before is not None
        cancels = not before.is_terminal and before.status != RunStatus.CANCELLING
        cancelled = self.run(self.engines[engine].cancel(run_id))
        assert cancelled == cancels, f"cancel of {before.status} {run_id} returned {cancelled}"
        if cancelled or before.status == RunStatus.CANCELLING:
            expected.cancelled = True

    @rule(run_id=runs, engine=st.integers(0, ENGINES - 1))
    def requeue(self, run_id: str, engine: int) -> None:
        expected = self.model.runs.get(run_id)
        run = self._get(run_id)
        if expected is None or run is None or expected.kind not in ("steps", "sleeper", "fails"):
            return
        if run.status not in (RunStatus.FAILED, RunStatus.CANCELLED):
            return
        self.run(self.engines[engine].requeue(run_id))
        self.model.requeues[run_id] += 1
        expected.cancelled = False
        self.model.terminal.pop(run_id, None)

    @rule(engine=st.integers(0, ENGINES - 1))
    def tick(self, engine: int) -> None:
        self._tick(self.engines[engine])

    @rule(seconds=st.sampled_from([0.5, 1.0, 2.0, 10.0]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule()
    def jump_past_the_lease(self) -> None:
        self.clock.advance(LEASE + 1)

    @precondition(lambda self: self.model.runs)
    @rule(engine=st.integers(0, ENGINES - 1), steps_in=st.integers(1, 40))
    def crash(self, engine: int, steps_in: int) -> None:
        """The engine dies ``steps_in`` event-loop steps into a pass; a new one replaces it."""
        doomed = self.engines[engine]
        passing = self.loop.create_task(doomed.tick())
        for _ in range(steps_in):
            if passing.done():
                break
            self.run(asyncio.sleep(0))
        passing.cancel()
        with contextlib.suppress(BaseException):
            self.run(passing)
        self.run(doomed._execution.leases.stop())  # a dead process renews nothing
        self._lost_with(engine)
        self.model.crashes += 1
        self.engines[engine] = self._engine()

    def _lost_with(self, engine: int) -> None:
        """What else dies with a crashed engine's process (a subclass's in-memory state)."""

    @precondition(lambda self: self.model.runs)
    @rule(
        engine=st.integers(0, ENGINES - 1),
        call=st.sampled_from(OUTAGE_CALLS),
        when=st.sampled_from(["before", "after"]),
        after=st.integers(0, 2),
        ticks=st.integers(0, 2),
    )
    def outage(self, engine: int, call: str, when: Any, after: int, ticks: int) -> None:
        """The engine's call of ``call`` after ``after`` more meets an outage ``when`` (before
        the store takes it, or after it committed); then it ticks ``ticks`` times."""
        cast(FlakyStore, self.engines[engine].store).fail(call, when=when, after=after)
        for _ in range(ticks):
            self._tick(self.engines[engine])

    @precondition(lambda self: self.model.runs)
    @rule(
        run_id=runs,
        to=st.lists(st.integers(0, ENGINES - 1), min_size=1, max_size=3),
        reason=st.sampled_from(["start", "wake", "timer"]),
        gaps=st.lists(st.integers(0, 6), min_size=3, max_size=3),
    )
    def deliver(self, run_id: str, to: list[int], reason: str, gaps: list[int]) -> None:
        """A run message taken off the run queue by each engine of ``to`` in turn (an engine
        twice, or several engines: a duplicate), ``gaps`` event-loop steps apart, whatever the
        run's state (a replay of a message already handled); then their turns run out."""
        if run_id not in self.model.runs:
            return
        engines = [self.engines[i] for i in to]

        async def deliveries() -> None:
            for engine, gap in zip(engines, gaps, strict=False):
                await engine._ready()
                engine._execution.take(run_id, handoff=reason == "timer")
                for _ in range(gap):
                    await asyncio.sleep(0)
            for engine in engines:
                local = engine._execution._local
                assert local is not None
                await local.wait(30.0)
                assert not local.inflight, f"a turn of {run_id} outlived its delivery"

        self.run(deliveries())

    # ---------------------------------------------------------------- at every instant

    @invariant()
    def no_run_is_lost(self) -> None:
        if not self.model.runs:
            return
        found = self.run(self.observer.get_runs(list(self.model.runs)))
        lost = set(self.model.runs) - set(found)
        assert not lost, f"runs acknowledged and gone: {sorted(lost)}"

    @invariant()
    def a_lane_never_has_more_holders_than_its_limit(self) -> None:
        holders = Counter(
            r.singleton_key for r in self._all() if r.holds_slot and r.singleton_key is not None
        )
        assert all(n <= 1 for n in holders.values()), holders

    @invariant()
    def a_quota_is_never_exceeded(self) -> None:
        assert self._active_quota() <= QUOTA_LIMIT

    @invariant()
    def a_step_queue_never_has_more_slots_held_than_its_concurrency(self) -> None:
        for name, held in self.holders().items():
            concurrency = QUEUES[name].concurrency
            assert concurrency is None or held <= concurrency, f"{name}: {held} slots held"

    @invariant()
    def a_slot_is_never_held_by_a_step_whose_outcome_is_recorded(self) -> None:
        # Such a step never asks its queue again: its slot would be held until its run settles
        # (and a run that needs the slot for a later step waits for itself).
        for view in self.run(self.observer.queue_views()):
            for entry in view.holders():
                step = self.run(self.observer.get_step(entry.run_id, entry.seq))
                done = step is not None and step.status in (StepStatus.COMPLETED, StepStatus.FAILED)
                assert not done, f"{view.row.settings.name}: {entry} holds a slot for {step}"

    @invariant()
    def a_terminal_run_stays_as_it_ended(self) -> None:
        for run in self._all():
            if not run.is_terminal:
                assert run.id not in self.model.terminal, f"{run.id} left {run.status}"
                continue
            before = self.model.terminal.setdefault(run.id, run.status)
            assert before == run.status, f"{run.id} went from {before} to {run.status}"

    # ---------------------------------------------------------------- at rest

    def _come_to_rest(self) -> None:
        """Advance past every timer and lease and tick every engine until nothing is due."""
        for _ in range(40):
            self.clock.advance(LEASE + 1)
            for engine in self.engines:
                self._tick(engine)
            if not self._unsettled():
                return
        raise AssertionError(f"the cluster never came to rest: {self._unsettled()}")

    def _check_final(self) -> None:
        for run_id, expected in self.model.runs.items():
            run = self._get(run_id)
            assert run is not None
            final = expected.final()
            assert final is not None
            got = (run.status, run.output if final[0] == RunStatus.COMPLETED else None)
            if final[1] is ANY:
                got = (run.status, ANY)
            assert got == final, f"{run_id} ({expected}) ended {run.status} {run.output!r}"
        self._check_queues()
        self._check_flow()
        self._check_sleeps()
        # A step runs again only when a crash or an outage cut its turn, or a requeue replays a
        # step that did not complete (a failed one): once per crash, outage or requeue at most.
        outages = sum(f.fired for f in self.flaky)
        for (run_id, seq), n in executions.items():
            allowed = 1 + self.model.crashes + outages + self.model.requeues[run_id]
            assert n <= allowed, f"step {seq} of {run_id} ran {n} times (at most {allowed})"

    def _check_queues(self) -> None:
        """The executions whose results their steps recorded (each ran inside its slot): at no
        moment more of them in flight in a queue than its concurrency, and no fixed window
        with more of them than the queue's rate limit admits."""
        recorded = {
            (r.run_id, int(r.input[1])): r.output
            for run_id, expected in self.model.runs.items()
            if expected.kind == "queued"
            for r in self.run(self.observer.list_steps(run_id))
        }
        held = [e for e in queue_log if recorded.get((e.run, e.seq)) == e.token]
        for name, queue in QUEUES.items():
            mine = [e for e in held if e.queue == name]
            if queue.concurrency is not None:
                for e in mine:
                    inside = [o for o in mine if o.begin <= e.begin < o.end]
                    assert len(inside) <= queue.concurrency, f"{name}: {inside} at once"
            if queue.rate_limit is not None:
                period = as_seconds(queue.rate_limit.period)
                windows = Counter(window_start(e.at, period) for e in mine)
                assert max(windows.values(), default=0) <= queue.rate_limit.limit, windows

    def _check_flow(self) -> None:
        """Throttled and debounced runs began (executed their step) no sooner than the
        instant the model gave them, which the store agrees with."""
        for run_id, expected in self.model.runs.items():
            if expected.kind not in ("throttled", "debounced") or expected.cancelled:
                continue
            run = self._get(run_id)
            assert run is not None
            stored = run.rate_at if expected.kind == "throttled" else run.begin_at
            assert stored == expected.begin_at, f"{run_id} held until {stored}, not {expected}"
            assert expected.begin_at is not None and began[run_id] >= expected.begin_at, (
                f"{run_id} began at {began[run_id]}, before {expected.begin_at}"
            )

    def _check_sleeps(self) -> None:
        """No step after a durable sleep executed before the sleep's wake time (a stale timer
        hand-off claims a sleeping run early; its turn must suspend the run again)."""
        for run_id, expected in self.model.runs.items():
            if expected.kind not in ("sleeper", "keyed") or self.model.requeues[run_id]:
                continue
            records = {r.seq: r for r in self.run(self.observer.list_steps(run_id))}
            nap, after = records.get(2), worked.get((run_id, 3))
            if nap is None or nap.wake_at is None or after is None:
                continue
            assert after >= nap.wake_at, f"{run_id} woke at {after}, before {nap.wake_at}"

    # ---------------------------------------------------------------- reads

    def holders(self) -> dict[str, int]:
        """Slots held in each step queue: entries admitted, of runs not settled."""
        raise NotImplementedError

    def _all(self) -> list[Run]:
        return list(self.run(self.observer.list_runs(limit=10_000)))

    def _get(self, run_id: str) -> Run | None:
        return self.run(self.observer.get_run(run_id))  # type: ignore[no-any-return]

    def _terminal_now(self) -> set[str]:
        return {r.id for r in self._all() if r.is_terminal}

    def _active_quota(self) -> int:
        return sum(1 for r in self._all() if r.concurrency_key == "sim:quota" and not r.is_terminal)

    def _unsettled(self) -> list[str]:
        """Active runs something will still happen to: pending, leased, or with a timer set
        (a run waiting for a signal that never comes is at rest)."""
        return [
            f"{r.id} {r.status}"
            for r in self._all()
            if not r.is_terminal
            and (r.status == RunStatus.PENDING or r.wake_at is not None or r.lease_owner)
        ]


HOLDERS = """SELECT e.queue, count(*) FROM {entries} AS e JOIN {runs} AS r ON r.id = e.run_id
WHERE e.admitted_at IS NOT NULL AND r.status NOT IN ('completed', 'failed', 'cancelled', 'dead')
GROUP BY e.queue"""


class MemoryCluster(Cluster):
    store_kind = "memory"

    def __init__(self) -> None:
        from runlane.stores import MemoryStore

        self.shared = MemoryStore()
        super().__init__()

    def new_store(self) -> Store:
        return self.shared

    def holders(self) -> dict[str, int]:
        runs = {r.id: r for r in self._all()}
        entries = self.shared._queues._entries.values()
        return dict(
            Counter(
                e.queue
                for e in entries
                if e.admitted_at is not None and not runs[e.run_id].is_terminal
            )
        )


class PostgresCluster(Cluster):
    """One throw-away database per example on the test server (the slow tier)."""

    store_kind = "postgres"

    def __init__(self) -> None:
        import uuid

        import psycopg

        from tests.conftest import ADMIN_URL

        self.admin = ADMIN_URL
        self.database = f"runlane_sim_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.database}"')
        self.url = f"{ADMIN_URL.rsplit('/', 1)[0]}/{self.database}"
        super().__init__()

    def new_store(self) -> Store:
        from runlane.stores.postgres import PostgresStore

        return PostgresStore(self.url, max_size=3)

    def holders(self) -> dict[str, int]:
        import psycopg

        with psycopg.connect(self.url) as conn:
            rows = conn.execute(
                HOLDERS.format(runs="runlane_runs", entries="runlane_queue_entries")
            )
            return dict(rows.fetchall())

    def teardown(self) -> None:
        import psycopg

        try:
            super().teardown()
        finally:
            with psycopg.connect(self.admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')


class SqliteCluster(Cluster):
    store_kind = "sqlite"

    def __init__(self) -> None:
        import tempfile

        self.folder = Path(tempfile.mkdtemp(prefix="runlane-sim-"))
        super().__init__()

    def new_store(self) -> Store:
        from runlane.stores.sqlite import SqliteStore

        return SqliteStore(self.folder / "sim.db")

    def holders(self) -> dict[str, int]:
        import sqlite3

        with contextlib.closing(sqlite3.connect(self.folder / "sim.db")) as conn:
            rows = conn.execute(HOLDERS.format(runs="runs", entries="queue_entries"))
            return dict(rows.fetchall())

    def teardown(self) -> None:
        import shutil

        try:
            super().teardown()
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


__all__ = ["Cluster", "MemoryCluster", "PostgresCluster", "SqliteCluster", "executions"]
