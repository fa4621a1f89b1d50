"""The frozen records the engine and the stores speak."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import MISSING, astuple, dataclass, field, fields
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from .attributes import AttributeValue, matches
from .errors import PayloadCodecError, error_dict

JSON = Any
"""A JSON-serialisable value: dict, list, str, int, float, bool or None."""


class RunStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUSPENDED = "suspended"
    BLOCKED = "blocked"
    PAUSED = "paused"
    CANCELLING = "cancelling"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DEAD = "dead"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATUSES


ACTIVE_STATUSES = frozenset(
    {
        RunStatus.PENDING,
        RunStatus.RUNNING,
        RunStatus.SUSPENDED,
        RunStatus.BLOCKED,
        RunStatus.PAUSED,
        RunStatus.CANCELLING,
    }
)
TERMINAL_STATUSES = frozenset(
    {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.DEAD}
)


@dataclass(frozen=True)
class Run:
    id: str
    workflow: str
    version: str
    status: RunStatus
    input: JSON
    output: JSON
    error: dict[str, Any] | None
    tags: tuple[str, ...]
    created_at: datetime
    updated_at: datetime
    wake_at: datetime | None
    parent_id: str | None
    namespace: str | None
    priority: int
    # What indexes the run for listings (``list_runs(attributes=...)``): set at its start and
    # by its body (``ctx.set_attributes``).
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    # Internals the engine needs; readable, but not part of the stable contract.
    singleton_key: str | None = None
    singleton_limit: int | None = None
    holds_slot: bool = False
    concurrency_key: str | None = None
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    deadline_at: datetime | None = None
    recoveries: int = 0
    wake_requested_at: datetime | None = None
    # The quota the run was admitted under (a requeue applies it again); None without one.
    concurrency_limit: int | None = None
    concurrency_statuses: frozenset[RunStatus] | None = None
    # Admission retries a singleton waiter was denied in a row (its fallback timer backs off).
    admission_retries: int = 0
    # The run has entered a step queue: its settlement releases what it holds or waits for.
    queued: bool = False
    # Terminal failures (failed or dead) so far, across requeues: names the failure handler runs.
    failures: int = 0
    # A rate-limited run's key (a lane of its workflow) and the instant its start counts in the
    # key's window; None without a rate limit.
    rate_key: str | None = None
    rate_at: datetime | None = None
    # The rate limit the start was counted under: its ``limit``, and the instant the start
    # leaves the key's window (``rate_at`` plus the period); what operators' lanes read.
    rate_limit: int | None = None
    rate_until: datetime | None = None
    # A singleton waiter a release woke: the instant of that release (the claim that admits it
    # reads it for the hand-off metric, and clears it).
    handoff_at: datetime | None = None
    # A run held by its rate limit (a throttle) or its debounce: blocked, and not claimable, until
    # this instant; None for a run never held.
    begin_at: datetime | None = None
    # A debounced run's key (a lane of its workflow): starts of it fold into the run until it begins.
    debounce_key: str | None = None
    # A remote workflow's turn is out: the task id whose decision the run waits for (meaningful
    # while the run is suspended; a decision for any other id is dropped).
    awaiting_decision_task_id: str | None = None
    # A fork: the run and the position it was forked from (its records before that position
    # were copied, never executed again).
    forked_from: tuple[str, int] | None = None
    # A pause asked while a turn held the lease: it takes effect at the turn's next write.
    pause_requested_at: datetime | None = None
    # A child started with ``detached=True``: its parent's cancellation leaves it running.
    detached: bool = False
    # The fencing token of the run's latest claim: every claim that leases the run takes the
    # next one, so each execution of a step presents a greater fence than the ones before it
    # (``runlane.step_context``).
    fence: int = 0

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def held(self, now: datetime) -> bool:
        """Whether the run is still held by its rate limit or debounce: it has not begun, and
        it does not wait for a singleton slot yet."""
        return self.begin_at is not None and self.begin_at > now

    @property
    def quota(self) -> QuotaGate | None:
        """The quota the run was admitted under, when it was recorded."""
        if self.concurrency_key is None or self.concurrency_limit is None:
            return None
        statuses = self.concurrency_statuses or ACTIVE_STATUSES
        return QuotaGate(self.concurrency_key, self.concurrency_limit, statuses)


class StepKind(StrEnum):
    STEP = "step"
    SLEEP = "sleep"
    SIGNAL = "signal"
    EVENT = "event"
    CHILD = "child"
    START_CHILD = "start_child"
    NOW = "now"
    SIDE_EFFECT = "side_effect"
    PATCH = "patch"  # a ``ctx.patched`` marker: the run took the patched branch here
    UPDATE = "update"  # ``ctx.wait_for_update``: the update taken (its id and payload)
    REPLY = "reply"  # ``ctx.reply``: the answer to an update (whose id is the input's)
    ATTRIBUTES = "attributes"  # ``ctx.set_attributes``: the attributes it merged (its output)


class StepStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


@dataclass(frozen=True)
class StepRecord:
    run_id: str
    seq: int
    name: str
    kind: str
    status: str
    input: JSON = None
    output: JSON = None
    error: dict[str, Any] | None = None
    attempts: int = 0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    last_heartbeat_at: datetime | None = None
    # When this record next needs attention: a sleep's end, a retry, a wait's timeout.
    wake_at: datetime | None = None
    # How many times the current attempt of a remote step was sent (re-sends of a lost dispatch).
    dispatches: int = 0
    # The fence of the execution that made the record, where the engine knows it (a step
    # executed by one of its turns, a remote step's last dispatch); None otherwise.
    fence: int | None = None

    @property
    def done(self) -> bool:
        return self.status in (StepStatus.COMPLETED, StepStatus.FAILED)


@dataclass(frozen=True)
class RunCursor:
    """Where a page of runs ends: the ``(created_at, id)`` of its last (oldest) run."""

    created_at: datetime
    id: str


@dataclass(frozen=True)
class RunQuery:
    """Which runs to list: every filter given must match. ``created_from`` is inclusive,
    ``created_until`` exclusive; ``after`` asks for the runs older than a page's last one;
    ``namespace`` keeps the runs of that namespace only."""

    workflow: str | None = None
    status: RunStatus | None = None
    tag: str | None = None
    created_from: datetime | None = None
    created_until: datetime | None = None
    after: RunCursor | None = None
    namespace: str | None = None
    # Runs whose attributes hold every one of these (``attributes.matches``); None: any run.
    attributes: Mapping[str, AttributeValue] | None = None

    def matches(self, run: Run) -> bool:
        """Whether ``run`` passes every filter and comes after the cursor (newest first)."""
        return (
            (self.workflow is None or run.workflow == self.workflow)
            and (self.namespace is None or run.namespace == self.namespace)
            and (self.status is None or run.status == self.status)
            and (self.tag is None or self.tag in run.tags)
            and (self.attributes is None or matches(run.attributes, self.attributes))
            and (self.created_from is None or run.created_at >= self.created_from)
            and (self.created_until is None or run.created_at < self.created_until)
            and (self.after is None or (run.created_at, run.id) < astuple(self.after))
        )


@dataclass(frozen=True)
class Settled:
    ok: bool
    value: JSON = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True)
class SingletonGate:
    """Singleton admission rules carried by a run spec.

    ``key`` is the lane (see ``admission.lane``): what stores count and lock by. ``user_key``
    is the key as the workflow's rule gave it, for errors and tags. ``retry``: seconds until a
    run created behind a full key is due anyway (its fallback timer's first delay, jitter
    included; the release of a slot wakes it at once regardless).
    """

    key: str
    limit: int = 1
    max_queue_depth: int | None = None
    replace: bool = False
    user_key: str = ""
    retry: float = 1.0

    @property
    def shown_key(self) -> str:
        return self.user_key or self.key


@dataclass(frozen=True)
class QuotaGate:
    """Concurrency quota rules carried by a run spec."""

    key: str
    limit: int
    count_statuses: frozenset[RunStatus] = ACTIVE_STATUSES


@dataclass(frozen=True)
class RateGate:
    """Rate limit rules carried by a run spec: at most ``limit`` starts of ``key`` in any window
    of ``period`` seconds; over it, a start is refused, or with ``delay`` held until the window
    allows it.

    ``key`` is a lane of the workflow (see ``admission.rate_lane``): what stores count and lock
    by. ``user_key`` is the key as the workflow's rule gave it (None: the whole workflow).
    """

    key: str
    limit: int
    period: float
    delay: bool = False
    user_key: str | None = None


@dataclass(frozen=True)
class DebounceGate:
    """Debounce rules carried by a run spec: starts of ``key`` (a lane of the workflow) fold into
    its run that has not begun, which then begins ``period`` seconds after the last of them, at
    most ``max_wait`` seconds after the first."""

    key: str
    period: float
    max_wait: float | None = None


@dataclass(frozen=True)
class RunSpec:
    """A run to create. ``created_at`` comes from the engine clock."""

    id: str
    workflow: str
    version: str
    input: JSON
    created_at: datetime
    tags: tuple[str, ...] = ()
    parent_id: str | None = None
    namespace: str | None = None
    priority: int = 0
    deadline_at: datetime | None = None
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    singleton: SingletonGate | None = None
    quota: QuotaGate | None = None
    rate: RateGate | None = None
    debounce: DebounceGate | None = None
    # A fork's: the records it starts with (copied from the run it forks, each ``done``), and
    # which run and position it forks.
    history: tuple[StepRecord, ...] = ()
    forked_from: tuple[str, int] | None = None
    detached: bool = False

    @property
    def limited(self) -> bool:
        """Whether a rate limit or a debounce applies to the start."""
        return self.rate is not None or self.debounce is not None

    @property
    def gated(self) -> bool:
        """Whether a start of the spec counts or locks anything (else it is a plain insert)."""
        return self.singleton is not None or self.quota is not None or self.limited


@dataclass(frozen=True)
class Started:
    """What a create did for one spec: the run (existing or new), or the admission refusal."""

    run: Run | None
    created: bool
    rejected: Exception | None = None
    # A singleton run created behind a full key: a claim now would only park it, so it is created
    # parked (``waiting_run``). The release of a slot wakes it or hands it over; its fallback
    # timer is the gate's ``retry``. Also a run created held (by a throttle or a debounce): its
    # timer begins it.
    waiting: bool = False
    # The new run, already leased to the creator (``create_runs(..., lease=...)``); ``run`` is
    # the run as it was created, ``pending``.
    claim: Claim | None = None
    # The start folded into a debounced run that had not begun: ``run`` is that run, with the
    # start's input and its new beginning.
    debounced: bool = False


def ready_ids(started: Iterable[Started]) -> list[str]:
    """The runs among ``started`` created now that may run at once (not waiting for a slot)."""
    return [s.run.id for s in started if s.created and not s.waiting and s.run is not None]


@dataclass(frozen=True)
class Signal:
    id: int
    run_id: str
    name: str
    payload: JSON
    created_at: datetime


UPDATE_SIGNALS = "$update:"
"""Updates are buffered among a run's signals under names of their own: this prefix, then
the update's name. No signal may be named so (``engine.signal`` refuses it)."""


def buffered_name(kind: StepKind, name: str) -> str:
    """The name under which a message that a wait of ``kind`` takes is buffered among the
    run's signals: a signal's own name; an update's, ``$update:<name>``."""
    return UPDATE_SIGNALS + name if kind == StepKind.UPDATE else name


@dataclass(frozen=True)
class Event:
    seq: int
    name: str
    payload: JSON
    created_at: datetime
    id: str | None = None


@dataclass(frozen=True)
class Claim:
    """A leased run with everything a turn needs to replay it.

    ``unreadable``: its payloads did not decode (a codec's key that is not the one they were
    written with): the claimer settles the run failed with this error instead of running it."""

    run: Run
    steps: Sequence[StepRecord]
    signals: Sequence[Signal]
    unreadable: PayloadCodecError | None = None


@dataclass(frozen=True)
class ClaimOutcome:
    """Result of a claim attempt: a claim, or why there is none."""

    claim: Claim | None = None
    parked: bool = False  # a singleton waiter denied a slot and parked until woken
    settled: Run | None = None  # the claim found the run terminal (e.g. a recovered cancelling run)
    # The claim is a recovery past the limit of a workflow with a dead-letter handler: the run
    # is leased so that its claimer settles it dead, with the handler, instead of running it.
    dying: bool = False
    # The claim admitted a singleton waiter that a release woke: when that release was (its
    # ``Run.handoff_at``, which the claim cleared).
    handed_off_at: datetime | None = None
    # The run is claimable, but its code is not among those the claimer serves: nothing was
    # written (an engine that serves it is to run it).
    unserved: bool = False


@dataclass(frozen=True)
class Settlement:
    status: RunStatus
    output: JSON = None
    error: dict[str, Any] | None = None
    continue_as: RunSpec | None = None
    # A failed or dead run's failure handler, started in the settling write.
    handler: RunSpec | None = None


FAILURES = frozenset({RunStatus.FAILED, RunStatus.DEAD})
"""The terminal statuses that count as a run's failures and start its failure handler."""


def dead_settlement(recoveries: int, max_recoveries: int | None) -> Settlement | None:
    """How a run recovered ``recoveries`` times settles when that is past ``max_recoveries``:
    dead; None while it may run again."""
    if max_recoveries is None or recoveries <= max_recoveries:
        return None
    error = {
        "type": "RecoveryLimitExceeded",
        "message": f"run recovered {recoveries} times (max {max_recoveries})",
    }
    return Settlement(RunStatus.DEAD, None, error)


def with_handler_error(error: dict[str, Any] | None, refusal: BaseException) -> dict[str, Any]:
    """A failed run's error once its failure handler could not be started: ``handler_error``
    holds why (the refusal's type, message and fields, as ``error_dict`` stores an error)."""
    return {**(error or {}), "handler_error": error_dict(refusal, with_traceback=False)}


@dataclass(frozen=True)
class RetryTimer:
    """A singleton waiter's fallback timer (the release of a slot wakes it at once regardless):
    ``first`` seconds after its first denied admission, doubling at each denial in a row, up to
    ``most``, scaled by ``jitter`` (drawn by the engine for each claim)."""

    first: float
    most: float
    jitter: float = 1.0

    def delay(self, denied_before: int) -> float:
        """Seconds to wait after a denial that follows ``denied_before`` denials in a row."""
        return min(self.most, self.first * 2.0 ** min(denied_before, 30) * self.jitter)

    def due(self, now: datetime, denied_before: int) -> datetime:
        return now + timedelta(seconds=self.delay(denied_before))


@dataclass(frozen=True)
class Lease:
    """A lease to grant: the claim token and when it expires. ``serves``: the code its holder
    can replay, when the run it leases is not known yet (a settlement's successor is leased
    only when it is one of those)."""

    owner: str
    until: datetime
    serves: Serves | None = None


@dataclass(frozen=True)
class Serves:
    """The code an engine can replay: the ``(workflow, version)`` pairs it registered or
    declared. An engine claims, recovers, times out and hands off only the runs of these pairs;
    the stores filter their claim queries on them (``workflows[i]``/``versions[i]`` are pair
    ``i``, sorted, the parameters an SQL statement joins on)."""

    pairs: frozenset[tuple[str, str]]

    def __contains__(self, code: object) -> bool:
        return code in self.pairs

    def covers(self, run: Run) -> bool:
        return (run.workflow, run.version) in self.pairs

    @property
    def workflows(self) -> tuple[str, ...]:
        return tuple(workflow for workflow, _ in sorted(self.pairs))

    @property
    def versions(self) -> tuple[str, ...]:
        return tuple(version for _, version in sorted(self.pairs))


def serves_run(serves: Serves | None, run: Run) -> bool:
    """Whether an engine serving ``serves`` (None: every code) may claim ``run``."""
    return serves is None or serves.covers(run)


@dataclass(frozen=True)
class EngineInfo:
    """An engine as it announced itself in the store: who it is, the ``(workflow, version)``
    pairs it serves (runs it claims), the worker groups its remote workflows and remote steps
    use, and its last heartbeat. ``alive``: it beat within three of its leases."""

    id: str
    host: str
    pid: int
    started_at: datetime
    last_beat_at: datetime
    serves: tuple[tuple[str, str], ...] = ()
    groups: tuple[str, ...] = ()
    namespace: str | None = None
    lease: float = 30.0
    alive: bool = True


@dataclass(frozen=True)
class SettleResult:
    """What a settlement set in motion: runs woken or created, and a successor leased."""

    woken: list[str] = field(default_factory=list)
    successor: Claim | None = None
    # The settlement's failure handler as its start went (created, found, or refused).
    handler: Started | None = None


@dataclass(frozen=True)
class CancelResult:
    """What a cancellation did: the runs whose status changed, and the runs it made due for
    the caller to run now (the waiters for the slots it freed, the parents of the runs it
    settled), as a settlement's ``woken``."""

    changed: list[str] = field(default_factory=list)
    woken: list[str] = field(default_factory=list)


def cancel_result(result: CancelResult) -> CancelResult:
    """``result`` with each run woken once, and none the same cancellation settled."""
    changed = set(result.changed)
    woken = [w for w in dict.fromkeys(result.woken) if w not in changed]
    return CancelResult(result.changed, woken)


def requeue_spec(run: Run, quota: QuotaGate | None, singleton: SingletonGate | None) -> RunSpec:
    """The gates of a requeue, as the spec of a start of ``run`` (stores check it as one)."""
    return RunSpec(
        run.id,
        run.workflow,
        run.version,
        run.input,
        run.created_at,
        quota=quota,
        singleton=singleton,
    )


_RUN_FIELDS = frozenset(f.name for f in fields(Run))


def evolved(run: Run, **changes: Any) -> Run:
    """``dataclasses.replace(run, **changes)`` without its walk over every field and its
    generated ``__init__`` (about 6x faster): the run transformations below make a copy of a
    36-field run for every store write, on both sides of it. ``changes`` must name fields of
    ``Run`` (asserted here; the tests run every transformation)."""
    assert changes.keys() <= _RUN_FIELDS, sorted(changes.keys() - _RUN_FIELDS)
    new = object.__new__(Run)
    state = new.__dict__  # a frozen dataclass forbids setattr, not its instance dict
    state.update(run.__dict__)
    state.update(changes)
    return new


# What every new run starts from: ``Run``'s defaults, pending, with no output, error or timer;
# None for the fields each spec sets (``run_from_spec``). Never handed out itself.
_PENDING = object.__new__(Run)
_PENDING.__dict__.update(
    {f.name: None if f.default is MISSING else f.default for f in fields(Run)},
    status=RunStatus.PENDING,
)


def run_from_spec(spec: RunSpec) -> Run:
    """A run as a spec creates it: pending (a copy of ``_PENDING``, as ``evolved`` makes one,
    without the frozen dataclass's ``__init__``: one ``object.__setattr__`` per field)."""
    singleton, quota = spec.singleton, spec.quota
    return evolved(
        _PENDING,
        id=spec.id,
        workflow=spec.workflow,
        version=spec.version,
        input=spec.input,
        tags=tuple(spec.tags),
        created_at=spec.created_at,
        updated_at=spec.created_at,
        parent_id=spec.parent_id,
        namespace=spec.namespace,
        priority=spec.priority,
        attributes=dict(spec.attributes),
        deadline_at=spec.deadline_at,
        singleton_key=singleton.key if singleton else None,
        singleton_limit=singleton.limit if singleton else None,
        concurrency_key=quota.key if quota else None,
        concurrency_limit=quota.limit if quota else None,
        concurrency_statuses=quota.count_statuses if quota else None,
        forked_from=spec.forked_from,
        detached=spec.detached,
    )


def leased_run(run: Run, lease: Lease) -> Run:
    """A run just created, claimed by ``lease`` in the same write (taking its slot, if keyed)."""
    return evolved(
        run,
        status=RunStatus.RUNNING,
        lease_owner=lease.owner,
        lease_expires_at=lease.until,
        holds_slot=run.singleton_key is not None,
        admission_retries=0,
        fence=run.fence + 1,
    )


def held_run(run: Run, spec: RunSpec, rate_at: datetime | None, begin_at: datetime | None) -> Run:
    """A run just created under a rate limit or a debounce: its start counted at ``rate_at``;
    held (blocked, due at ``begin_at``, its execution timeout counted from then) when
    ``begin_at`` is given."""
    rate = spec.rate
    limits = evolved(
        run,
        rate_key=rate.key if rate else None,
        rate_at=rate_at,
        rate_limit=rate.limit if rate else None,
        rate_until=rate_at + timedelta(seconds=rate.period) if rate and rate_at else None,
        debounce_key=spec.debounce.key if spec.debounce else None,
    )
    return limits if begin_at is None else _held_until(limits, spec, begin_at)


def debounced_run(run: Run, spec: RunSpec, begin_at: datetime, now: datetime) -> Run:
    """A held debounced run once a start folded into it: the start's input, a later beginning."""
    return evolved(_held_until(run, spec, begin_at), input=spec.input, updated_at=now)


def _held_until(run: Run, spec: RunSpec, begin_at: datetime) -> Run:
    """``run`` blocked until ``begin_at``, its execution timeout (the spec's) counted from then."""
    deadline = run.deadline_at
    if spec.deadline_at is not None:
        deadline = begin_at + (spec.deadline_at - spec.created_at)
    return evolved(
        run, status=RunStatus.BLOCKED, begin_at=begin_at, wake_at=begin_at, deadline_at=deadline
    )


def blocked_run(run: Run, retry: RetryTimer, now: datetime) -> Run:
    """A singleton waiter its claim did not admit: blocked until woken, or until its timer."""
    return evolved(
        run,
        status=RunStatus.BLOCKED,
        wake_at=retry.due(now, run.admission_retries),
        admission_retries=run.admission_retries + 1,
        wake_requested_at=None,
        lease_owner=None,
        lease_expires_at=None,
        updated_at=now,
    )


def waiting_run(run: Run, retry: float, now: datetime) -> Run:
    """A singleton run created behind a full key, parked as a claim would park it now:
    blocked, due ``retry`` seconds from now, one denial counted (the next one doubles)."""
    return evolved(
        run, status=RunStatus.BLOCKED, wake_at=now + timedelta(seconds=retry), admission_retries=1
    )


def older_fence(fence: int | None, record: StepRecord) -> bool:
    """Whether a worker's ``fence`` (of its task) is older than the fence of the step's record:
    the step was sent again since under a newer fence, so that worker's result or beat is
    stale. A side that sends no fence (a worker or an engine from before fencing) is never."""
    return fence is not None and record.fence is not None and fence < record.fence


def claimed_run(run: Run, lease: Lease, now: datetime) -> Run:
    """A run its claim leased to ``lease``: running, its wake-up and wake request consumed,
    its fence the next one (invariant 16 of docs/design.md)."""
    return evolved(
        run,
        status=RunStatus.RUNNING,
        lease_owner=lease.owner,
        lease_expires_at=lease.until,
        wake_at=None,
        wake_requested_at=None,
        updated_at=now,
        fence=run.fence + 1,
    )


def admitted_run(run: Run) -> Run:
    """A singleton waiter its claim admitted: it holds a slot; its denials and hand-off stamp
    are spent."""
    return evolved(run, holds_slot=True, admission_retries=0, handoff_at=None)


def suspended_run(
    run: Run, wake_at: datetime | None, now: datetime, blocked: bool = False, due: bool = False
) -> Run:
    """The run as a suspension leaves it: lease gone, due at ``wake_at``, or at once when a wake
    was requested during the turn (the request is consumed) or the caller says it is ``due``;
    ``blocked`` when it waits for admission (a step-queue slot); ``paused`` when a pause was
    asked during the turn (the request is consumed: its resume makes it due)."""
    status = RunStatus.BLOCKED if blocked else RunStatus.SUSPENDED
    return evolved(
        run,
        status=RunStatus.PAUSED if run.pause_requested_at is not None else status,
        wake_at=now if due or run.wake_requested_at is not None else wake_at,
        wake_requested_at=None,
        pause_requested_at=None,
        lease_owner=None,
        lease_expires_at=None,
        updated_at=now,
    )


def awaiting_decision(run: Run, task_id: str, deadline: datetime, now: datetime) -> Run:
    """A remote workflow turn's run parked until its decision ``task_id`` (or ``deadline``);
    one a pause was asked of during the turn is parked ``paused`` instead (no turn goes out)."""
    if run.pause_requested_at is not None:
        return evolved(suspended_run(run, deadline, now), awaiting_decision_task_id=None)
    return evolved(
        run,
        status=RunStatus.SUSPENDED,
        awaiting_decision_task_id=task_id,
        wake_at=deadline,
        lease_owner=None,
        lease_expires_at=None,
        updated_at=now,
    )


def pausable(run: Run) -> bool:
    """Whether a pause applies to ``run``: active, neither paused nor asked to pause yet, and
    not being cancelled."""
    return (
        not run.is_terminal
        and run.status not in (RunStatus.PAUSED, RunStatus.CANCELLING)
        and run.pause_requested_at is None
    )


def paused_run(run: Run, now: datetime) -> Run:
    """``run`` (pausable) as a pause leaves it: a run a turn holds (or whose remote turn is
    out) is asked to pause, and pauses at that turn's next write; any other is ``paused`` now,
    its wake time and its slots kept."""
    if run.status == RunStatus.RUNNING or run.awaiting_decision_task_id is not None:
        return evolved(run, pause_requested_at=now)
    return evolved(run, status=RunStatus.PAUSED, updated_at=now)


def leaves_line(run: Run) -> bool:
    """Whether pausing ``run`` takes a waiter out of its key's line: a release may have woken
    it for a slot it will not take now, so the key's next waiters are woken in its stead."""
    return run.singleton_key is not None and not run.holds_slot and run.status != RunStatus.PAUSED


def resumable(run: Run) -> bool:
    """Whether a resume applies to ``run``: paused, or asked to pause and not paused yet."""
    return run.status == RunStatus.PAUSED or (
        run.pause_requested_at is not None and not run.is_terminal
    )


def resumed_run(run: Run, now: datetime) -> Run:
    """``run`` (resumable) as a resume leaves it: a pause not taken yet withdrawn; a paused run
    due now (a waiter for a slot, or a run its throttle or debounce still holds, ``blocked``,
    the held one until it begins), so a turn takes up what came meanwhile."""
    if run.status != RunStatus.PAUSED:
        return evolved(run, pause_requested_at=None)
    waiter = run.singleton_key is not None and not run.holds_slot
    held = run.held(now)
    return evolved(
        run,
        status=RunStatus.BLOCKED if waiter or held else RunStatus.SUSPENDED,
        wake_at=run.begin_at if held else now,
        pause_requested_at=None,
        updated_at=now,
    )


def cancelling_run(run: Run, error: dict[str, object] | None, now: datetime) -> Run:
    """A leased run a cancellation reached: ``cancelling`` until its turn's next write, which
    settles it ``cancelled`` (the turn cannot be stopped mid-step)."""
    return evolved(run, status=RunStatus.CANCELLING, updated_at=now, error=error)


def settled_run(run: Run, settlement: Settlement, now: datetime) -> Run:
    """The run as a terminal settlement leaves it: outcome recorded, a failure counted, slot,
    lease and wake cleared."""
    return evolved(
        run,
        status=settlement.status,
        output=settlement.output,
        error=settlement.error,
        failures=run.failures + int(settlement.status in FAILURES),
        holds_slot=False,
        lease_owner=None,
        lease_expires_at=None,
        wake_at=None,
        wake_requested_at=None,
        pause_requested_at=None,
        updated_at=now,
    )


def refused_handler(settled: Run, handler: Started) -> Run | None:
    """The settled run with its failure handler's refused start recorded; None if not refused."""
    if handler.rejected is None:
        return None
    return evolved(settled, error=with_handler_error(settled.error, handler.rejected))


def requeued_run(run: Run, now: datetime, deadline_at: datetime | None) -> Run:
    """The run as a requeue leaves it: pending again, outcome, lease, slot and recoveries cleared
    (its failures are kept: the next one is counted after them)."""
    return evolved(
        run,
        status=RunStatus.PENDING,
        output=None,
        error=None,
        holds_slot=False,
        recoveries=0,
        admission_retries=0,
        lease_owner=None,
        lease_expires_at=None,
        wake_at=None,
        wake_requested_at=None,
        deadline_at=deadline_at,
        begin_at=None,
        updated_at=now,
    )


@dataclass(frozen=True)
class QueueSettings:
    """A step queue as the store keeps it: every engine sharing the store enforces these."""

    name: str
    concurrency: int | None = None
    rate_limit: int | None = None  # admissions per fixed window of ``rate_period`` seconds
    rate_period: float | None = None
    fairness: str = "fifo"  # "fifo" | "key"
    order: str = "fifo"  # "fifo" | "lifo"


@dataclass(frozen=True)
class Admission:
    """What a step queue answered: admitted, or when to ask again (None: when woken; the
    caller's fallback timer then), and the waiters it woke to take a free slot first."""

    admitted: bool
    retry_at: datetime | None = None
    woken: tuple[str, ...] = ()


@dataclass(frozen=True)
class StoredSchedule:
    """A schedule's row: its definition (``Schedule.to_record``), timing and last fire.

    ``next_window_at`` is the next window to fire (its run id names it); ``next_fire_at`` the
    moment to fire it (the window plus its jitter). Both are None while the schedule is paused.
    """

    id: str
    definition: dict[str, Any]
    paused: bool
    next_window_at: datetime | None
    next_fire_at: datetime | None
    created_at: datetime
    updated_at: datetime
    last_fire_at: datetime | None = None
    last_run_id: str | None = None
    last_error: dict[str, Any] | None = None


@dataclass(frozen=True)
class WindowFire:
    """One schedule's fire in a batch (``Store.fire_windows``): the compare-and-set of its next
    window (from ``expected`` to ``next_window``, fired at ``next_fire``) and the run of the
    window it fires, ``spec`` (None: the schedule only moves on, firing nothing)."""

    schedule_id: str
    expected: datetime
    next_window: datetime
    next_fire: datetime
    spec: RunSpec | None = None
    window: datetime | None = None


@dataclass(frozen=True)
class Writes:
    """Records a turn flushes with its next write, in one transaction."""

    steps: Sequence[StepRecord] = ()
    consumed_signals: Sequence[int] = ()
    children: Sequence[RunSpec] = field(default_factory=tuple)
    events: Sequence[tuple[str, int]] = ()
    """A suspension's event waits, each (name, the last seq its turn read): an event published
    since, while the turn ran, makes the suspended run due at once (its publish could not see
    the wait, which this write creates)."""


@dataclass(frozen=True)
class AuditEntry:
    """An operator action taken through the HTTP API or the command line, as the audit log
    keeps it: when, who (a token's name, or the OS user of a command), through what (``http``
    or ``cli``), which action on which run, and how it went (``ok``, else what refused it).

    ``detail`` names what else the action was about (a signal's or update's name, a schedule,
    an event), never a payload. ``id`` is the store's, in the order entries were appended."""

    at: datetime
    actor: str
    source: str
    action: str
    outcome: str
    run_id: str | None = None
    namespace: str | None = None
    detail: str | None = None
    id: int = 0


@dataclass(slots=True)
class LaneMember:
    """One active run of a lane as the lanes overview reads it: a row, not a run (the overview
    of 1,000 lanes must not build 10,000 runs).

    ``kind`` and ``name`` name the lane (``singleton`` and the run's ``singleton_key``, or
    ``concurrency`` and its ``concurrency_key``). ``holds`` says whether the run holds a slot of
    the singleton lane, or is counted by the quota (its status is one the quota counts);
    ``place`` is its place among the lane's runs that hold (or do not), oldest first from 1,
    and ``of`` how many those are. ``limit`` is the limit the lane's newest run carries (the one
    its workflow declares now)."""

    kind: str
    name: str
    run_id: str
    workflow: str
    status: RunStatus
    created_at: datetime
    holds: bool
    place: int
    of: int
    limit: int | None
