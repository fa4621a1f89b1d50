"""The Store protocol: the durable state of runs, checkpoints, leases and admission.

The docstrings here are the contract every store passes (``runlane.testing.store_contract`` holds
the suite). Times are passed in by the engine (its clock); a store never reads a clock of its own.

Vocabulary:

* **Lease**: a run being executed is ``running`` with ``lease_owner`` set to a token unique to
  that claim and ``lease_expires_at`` in the future. Every turn write is *fenced*: it applies only
  while the caller's token still holds the lease, else it raises :class:`LeaseLostError` (or
  :class:`RunCancelling` when the run was cancelled during the turn) and writes nothing.
* **Wake**: making a waiting run due. For a ``suspended``/``blocked`` run a wake sets
  ``wake_at = now``; for a leased run (a turn is in flight) it stamps ``wake_requested_at`` so the
  turn's suspend write keeps the run due instead of letting it sleep; a pending run is already due.
  A suspended run awaiting a remote decision (``awaiting_decision_task_id`` set) is left alone:
  the wake stamps ``wake_requested_at``, which the decision's apply finds (its suspend rewakes).
* **Singleton slot**: a run with a ``singleton_key`` holds a slot (``holds_slot``) from the claim
  that admitted it until its terminal settlement, whatever happens in between (suspension, lease
  expiry, restart). Waiters are the key's active runs without a slot, FIFO by
  ``(created_at, id)``.
* **Quota**: runs sharing a ``concurrency_key`` whose status is in the gate's counted statuses.
* **Step queue entry**: a step (run id, seq) waiting for admission to a step queue, or holding
  one of its slots from admission until the attempt is recorded. Entries of a settled run count
  for nothing; its settlement deletes them (see :mod:`runlane.step_queues` for the order of waiters).
* **Rate window**: the runs sharing a ``rate_key``, whatever their status, each counted at its
  ``rate_at``; a start fits when fewer than ``limit`` of them are later than ``period`` before
  its own instant.
* **Held**: a run its throttle or debounce holds is ``blocked`` with ``wake_at = begin_at`` and
  ``begin_at > now``. It is no singleton waiter until then: admission neither counts it ahead of
  other waiters nor wakes or hands a slot to it.
* **Fence**: every write that leases a run to a claimer (a claim, a claim at creation, a
  settlement's hand-off to a successor, a decision's claim) sets ``fence = fence + 1`` in that
  same write, and never otherwise changes it (a requeue keeps it). A step record keeps the
  ``fence`` its writer gave it (the execution that made it); a worker's report carrying a fence
  older than its record's is stale (``models.older_fence``).
* **Served**: an engine claims only the runs whose ``(workflow, version)`` it can replay
  (:class:`~runlane.models.Serves`). The claim queries and claims take ``serves`` and leave
  every other run exactly as it is (``serves=None``: every code, for tools and tests). An index
  serves the filter: a poll reads each served pair's own entries, never the others'.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from ..activity import ActivityCount
from ..attributes import AttributeValue
from ..models import (
    Admission,
    AuditEntry,
    CancelResult,
    Claim,
    ClaimOutcome,
    EngineInfo,
    Event,
    LaneMember,
    Lease,
    QueueSettings,
    QuotaGate,
    RetryTimer,
    Run,
    RunQuery,
    RunSpec,
    RunStatus,
    Serves,
    Settlement,
    SettleResult,
    Signal,
    SingletonGate,
    Started,
    StepKind,
    StepRecord,
    StoredSchedule,
    WindowFire,
    Writes,
)
from ..step_queues import QueueRequest, QueueView


def check_lease(specs: Sequence[RunSpec], lease: Lease | None, claims: int = 1) -> None:
    """``create_runs``'s ``lease`` is offered to the first ``claims`` specs, never a fork's (a
    claim at creation carries no history)."""
    if claims < 0:
        raise ValueError("claims must be 0 or more")
    if lease is not None and any(s.history for s in specs[:claims]):
        raise ValueError("a lease cannot claim a fork at its creation")


def offered(specs: Sequence[RunSpec], lease: Lease | None, claims: int) -> list[Lease | None]:
    """The lease each spec of a ``create_runs`` batch is offered: the first ``claims``."""
    return [lease if n < claims else None for n in range(len(specs))]


def window_results(
    fires: Sequence[WindowFire], moved: Collection[str], started: Mapping[str, Started]
) -> list[list[Started] | None]:
    """``fire_windows``'s answer from the schedules that ``moved`` and the start of each one's
    run (by schedule id): None for a fire whose compare failed, else its start, if it has one."""
    return [
        None if f.schedule_id not in moved else [started[f.schedule_id]] if f.spec else []
        for f in fires
    ]


class Reads(Protocol):
    """What a store answers to readers: runs, their steps and signals, the lanes, the
    engines. Every method only reads (it locks nothing a turn waits for).

    An engine's reads go through this door (``Engine.read``): a store is one, and an engine
    fenced to its namespace (``scope_reads``) reads through
    :class:`runlane.namespaces.NamespaceReads`, which sees that namespace's runs only.
    """

    async def get_run(self, run_id: str) -> Run | None:
        """The run, or None."""
        ...

    async def get_runs(self, run_ids: Sequence[str]) -> dict[str, Run]:
        """The runs that exist among ``run_ids``, by id."""
        ...

    async def list_runs(
        self,
        *,
        workflow: str | None = None,
        status: RunStatus | None = None,
        tag: str | None = None,
        parent_id: str | None = None,
        namespace: str | None = None,
        limit: int = 100,
        offset: int = 0,
        attributes: Mapping[str, AttributeValue] | None = None,
    ) -> list[Run]:
        """Runs matching every filter given, newest first (``created_at``, then id, descending).

        ``attributes``: runs whose attributes hold every entry, equal in value and type
        (``runlane.attributes.same_value``); an index that keeps each value's runs newest first
        serves it (the SQL stores walk the first attribute's and test the others on each run),
        so a page reads about as many runs as it lists, however many hold the value."""
        ...

    async def page_runs(self, query: RunQuery, limit: int) -> list[Run]:
        """At most ``limit`` runs matching ``query``, newest first (``created_at``, then id,
        descending), starting after ``query.after``. ``query.attributes`` filters as
        :meth:`list_runs`'s ``attributes`` does.

        Keyset paging: a page costs the same however deep it is (an index walk from the
        cursor), and runs created meanwhile never shift the pages that follow.
        """
        ...

    async def count_runs(self, query: RunQuery) -> dict[RunStatus, int]:
        """How many runs match ``query`` (its cursor ignored), by status; a status without
        runs is left out."""
        ...

    async def active_run_counts(
        self, namespace: str | None = None
    ) -> dict[tuple[str, RunStatus], int]:
        """How many active runs there are (of ``namespace``; None: of every namespace), by
        ``(workflow, status)``; pairs without runs are left out. Reads the active runs only,
        however many settled runs are kept."""
        ...

    async def active_code_counts(self, namespace: str | None = None) -> dict[tuple[str, str], int]:
        """How many active runs there are (of ``namespace``; None: of every namespace), by
        ``(workflow, version)``; codes without active runs are left out. Reads the active runs
        only."""
        ...

    async def list_engines(self) -> list[EngineInfo]:
        """Every engine record, oldest ``started_at`` first (then id); ``alive`` as stored
        (the caller judges it from ``last_beat_at`` and ``lease``)."""
        ...

    async def run_activity(
        self, since: datetime, until: datetime, namespace: str | None = None
    ) -> list[ActivityCount]:
        """The runs created from ``since`` (inclusive) to ``until`` (exclusive), counted by the
        UTC minute they were created in (``status`` and ``bucket`` None), and the runs settled
        in that time (that are still terminal), counted by the minute they settled in, their terminal status and
        their latency bucket (``activity.latency_bucket`` of the seconds from ``created_at`` to
        the settlement); counts of zero are left out, in no order. Of ``namespace``'s runs only,
        or of every namespace's for None. Two indexed range reads (runs by creation; terminal
        runs by status and settlement instant), never a walk of older runs. A read for
        operators; it locks nothing."""
        ...

    async def lane_runs(self, lane: str | None = None) -> list[Run]:
        """The active runs that hold or wait for a singleton slot, or count against a quota
        (``singleton_key`` or ``concurrency_key`` set), oldest first (``created_at``, then id).
        With ``lane`` (a stored singleton or quota key), only that lane's: a search of its
        index, whatever else is active."""
        ...

    async def lane_members(
        self, shown: int, namespace: str | None = None, key: str | None = None
    ) -> list[LaneMember]:
        """The lanes overview: of each singleton lane with active runs, its first ``shown``
        slot holders and first ``shown`` waiters; of each quota key with active runs, its first
        ``shown`` counted runs and first ``shown`` uncounted ones; each oldest first and with
        how many there are (see :class:`LaneMember`). Of
        ``namespace``'s runs only, or of every namespace's for None. With ``key``, only the
        lanes shown by that key (``lanes.lane_key``: a singleton lane's key without its
        workflow, a quota's without its namespace), counted and listed as in the whole
        overview; a store need not sort or count the other lanes' runs. One read of the active
        gated runs' indexes, the counting done by the store: the rows it returns are bounded by
        the lanes, not by their runs. A read for operators; it locks nothing."""
        ...

    async def limited_runs(self, now: datetime) -> list[Run]:
        """The runs that make up the run-level rate limits and debounces at ``now``, whatever
        their status, oldest first (``created_at``, then id): each start still inside its rate
        key's window (``rate_until > now``, a throttled start counted ahead of time included),
        and each debounced run that has not begun (``debounce_key`` set, ``blocked``,
        ``begin_at > now``). One indexed read for operators; it locks nothing."""
        ...

    async def queue_views(self) -> list[QueueView]:
        """Every registered step queue, by name: its settings and current rate window, the
        entries of its unsettled runs (holders and waiters) by arrival, and the last served
        count of their fairness keys. A read for operators; it locks nothing."""
        ...

    async def get_step(self, run_id: str, seq: int) -> StepRecord | None:
        """The run's step record at ``seq``, or None."""
        ...

    async def list_steps(self, run_id: str) -> list[StepRecord]:
        """The run's step records by seq; ``[]`` for an unknown run."""
        ...

    async def list_signals(self, run_id: str) -> list[Signal]:
        """The signals delivered to the run and not consumed yet, oldest first; ``[]`` for an
        unknown run."""
        ...

    async def list_audit(
        self, limit: int, *, before: int | None = None, namespace: str | None = None
    ) -> list[AuditEntry]:
        """The audit log, newest first: at most ``limit`` entries, those with ``id < before``
        when it is given (the next page after an entry), of ``namespace`` only when it is
        given. ``[]`` when there is none."""
        ...


@runtime_checkable
class Store(Reads, Protocol):
    """Durable state for an engine. Every method is a single atomic unit of work; its reads
    are those of :class:`Reads`."""

    atomic_admission: bool
    """True when singleton admission and quotas are checked and applied atomically."""

    async def open(self) -> None:
        """Connect and bring the schema up to date. Idempotent."""

    async def close(self) -> None:
        """Release connections. Idempotent."""

    # ---------------------------------------------------------------- starts

    async def create_runs(
        self,
        specs: Sequence[RunSpec],
        now: datetime,
        *,
        lease: Lease | None = None,
        claims: int = 1,
    ) -> list[Started]:
        """Create runs as ``pending``, one :class:`Started` per spec, in order. A run keeps its
        spec's ``attributes`` (indexed as :meth:`list_runs` reads them).

        Per spec, atomically: if a run with ``spec.id`` exists, return it (``created=False``)
        without any admission check. Otherwise apply the gates, then insert:

        * quota: count runs with ``concurrency_key == gate.key`` whose status is in
          ``gate.count_statuses``; if ``count >= gate.limit`` refuse with
          ``ConcurrencyLimitError(workflow, key, limit, count)``.
        * singleton ``max_queue_depth``: count the key's active runs; if
          ``count >= limit + max_queue_depth`` refuse with ``SingletonQueueFullError``.
        * singleton ``replace``: cancel the key's active runs (a leased one goes to
          ``cancelling``; others settle ``cancelled`` at once, releasing slots and waking waiters).

        A refused spec yields ``Started(None, False, rejected=error)`` and writes nothing; other
        specs in the batch are unaffected. Gates of different keys never wait on each other.

        A new singleton run (not ``replace``) whose key already has ``limit`` or more runs ahead
        of it (slot holders, and waiters that are not cancelling) is ``waiting=True``: it is
        created parked, as a claim refusing it now would park it (``models.waiting_run``:
        ``blocked``, ``wake_at`` ``gate.retry`` seconds after ``created_at``, one
        ``admission_retries``), so that no claim is spent on it before a release wakes it.

        ``lease`` (offered to the first ``claims`` specs, a fork's never): a run created now
        from an offered spec that a claim would admit at once (no singleton key, or one that is
        not ``waiting`` nor ``replace``) is also claimed for ``lease`` in the same write, taking
        its slot if keyed; ``Started.claim`` carries it (``Started.run`` is the run as created,
        ``pending``). A batch of starts an engine will execute at once is claimed in the write
        that creates it, as a single start is: no claim of each run after it.

        Rate limits and debounce (``spec.rate``, ``spec.debounce``), in the same atomic unit,
        after the existing-id check (an idempotent restart is never refused nor folded):

        * debounce: if the key has a held run (``debounce_key == gate.key``, ``blocked``,
          ``begin_at > now``), the start folds into it and nothing else applies (no gate counts
          it, it adds no run): the run takes ``spec.input``, ``begin_at = wake_at =
          admission.refolded_begin(gate, run, now)``, its deadline counted from then
          (``models.debounced_run``), and comes back as ``Started(run, False, debounced=True)``.
        * rate limit: ``last`` is the ``limit``-th most recent ``rate_at`` of the key (None when
          it has fewer); without ``delay``, ``admission.rate_refusal`` refuses a start before
          ``last + period`` with ``RateLimitError(workflow, key, limit, period, retry_after)``,
          checked before the gates above.
        * a new run records ``rate_key``/``debounce_key`` and ``admission.start_times(spec,
          last, now)``: ``rate_at``, and ``begin_at`` when it begins later (a throttle's window,
          a debounce's period). Such a run is created held (``models.held_run``: ``blocked``,
          ``wake_at = begin_at``, its deadline shifted by the wait), ``waiting=True``, and never
          claimed by ``lease``.

        A fork's spec (``spec.history``, ``spec.forked_from``): its new run records
        ``forked_from``, and its records (``spec.history``, each of the new run's id) are
        written in the same atomic unit as the run; a run of the id that exists already stays
        as it is (its records too). ``lease`` never claims a fork (``ValueError``).
        """
        ...

    # ---------------------------------------------------------------- claims

    async def pending_run_ids(
        self, now: datetime, limit: int, namespace: str | None, *, serves: Serves | None = None
    ) -> list[str]:
        """Ids of ``pending`` runs, highest priority first, then oldest ``(created_at, id)``.

        ``namespace=None`` means every namespace; ``serves`` keeps the runs of those codes only
        (see "Served"), in the same order, at most ``limit`` of them.
        """
        ...

    async def due_run_ids(
        self, now: datetime, limit: int, namespace: str | None, *, serves: Serves | None = None
    ) -> list[str]:
        """Ids of suspended/blocked runs that are due (``wake_at <= now``), most overdue first."""
        ...

    async def expired_run_ids(
        self, now: datetime, limit: int, namespace: str | None, *, serves: Serves | None = None
    ) -> list[str]:
        """Ids of running/cancelling runs whose lease expired (``lease_expires_at <= now``)."""
        ...

    async def timed_out_run_ids(
        self, now: datetime, limit: int, namespace: str | None, *, serves: Serves | None = None
    ) -> list[str]:
        """Ids of active runs past their ``deadline_at`` (execution timeout)."""
        ...

    async def claim_run(
        self,
        run_id: str,
        owner: str,
        now: datetime,
        lease_until: datetime,
        *,
        singleton_retry: RetryTimer,
        max_recoveries: int | None = None,
        handoff: bool = False,
        dead_letters: Collection[str] = (),
        serves: Serves | None = None,
    ) -> ClaimOutcome:
        """Lease a run for one turn, atomically.

        Claimable: ``pending``; ``suspended``/``blocked`` with ``wake_at <= now`` (with
        ``handoff=True``, a wake delivered through the run queue, whatever its ``wake_at``, but
        never before a held run's ``begin_at``: a stale or replayed hand-off begins no debounced
        or throttled run early); a
        ``running``/``cancelling`` run whose lease expired (a recovery: ``recoveries += 1``).
        Anything else returns an empty outcome and writes nothing. A claimable run whose code
        ``serves`` does not cover is not claimed either: nothing is written (no recovery is
        counted, nothing is parked or settled) and ``outcome.unserved`` is true.

        * A recovered ``cancelling`` run settles ``cancelled`` (``outcome.settled``).
        * A recovery beyond ``max_recoveries`` settles the run ``dead`` (``outcome.settled``,
          as ``models.dead_settlement`` words it), unless its workflow is among
          ``dead_letters`` (workflows whose dead runs start a handler, which only the caller
          can build): that run is leased as below, and ``outcome.dying`` says that the claimer
          is to settle it ``dead`` through :meth:`settle_run` under this lease instead of
          running it. If the claimer dies first, the lease expires and the next claim of it is
          another recovery beyond the limit: dying again.
        * A singleton run without a slot is admitted only when its key has a free slot and it
          is among the oldest waiters for the free slots; admitted, it holds the slot from this
          write on (and ``admission_retries`` goes back to 0). Denied, it is parked ``blocked``
          with ``wake_at = singleton_retry.due(now, admission_retries)``, ``admission_retries``
          grows by one, and ``outcome.parked`` is true.
        * Claimed: status ``running``, lease set, ``wake_at`` and ``wake_requested_at`` cleared,
          the next ``fence`` taken; the outcome carries the run, its step records (by seq) and
          its unconsumed signals (oldest first).
        """
        ...

    async def park_full_waiters(self, timers: Mapping[str, RetryTimer], now: datetime) -> list[str]:
        """Deny, in one atomic unit, the retries of the singleton waiters among ``timers`` (run
        id -> its fallback timer) whose key has every slot held; their ids.

        A waiter here is a ``blocked`` run without a slot, due (``wake_at <= now``), begun, not
        leased. Each is parked again as :meth:`claim_run` denies and parks one: ``wake_at =
        timer.due(now, admission_retries)``, ``admission_retries`` grows by one. Every other
        run is left as it is, for the caller to claim one by one (a claim admits or denies it
        exactly). The keys are counted as an admission counts them (under their locks), so a
        release is never undone: a waiter it woke either sees the freed slot or was parked
        before the release, which then wakes it.
        """
        ...

    async def renew_leases(self, leases: Mapping[str, str], lease_until: datetime) -> set[str]:
        """Extend the leases of ``leases`` (run id -> owner) to ``lease_until``, in one call.

        Returns the ids extended; a run its owner no longer holds (taken over, settled, unknown)
        is left alone and missing from the result.
        """
        ...

    async def hand_off_due_runs(
        self,
        now: datetime,
        limit: int,
        namespace: str | None,
        hold_until: datetime,
        *,
        serves: Serves | None = None,
    ) -> list[Run]:
        """Take due runs for hand-off through a run queue, atomically.

        At most ``limit`` suspended/blocked runs with ``wake_at <= now`` (of ``serves``'s
        codes), most overdue first
        (rows another instance is taking at the same moment are skipped, not waited for), get
        ``wake_at = hold_until`` and are returned as they now are. Other instances' polls then do
        not hand them off again; if the wake message is lost, the run is due again at
        ``hold_until``.
        """
        ...

    # ---------------------------------------------------------------- remote steps (unfenced)

    async def record_step_result(
        self,
        run_id: str,
        seq: int,
        attempt: int,
        ok: bool,
        output: object,
        error: dict[str, object] | None,
        now: datetime,
        *,
        fence: int | None = None,
    ) -> str:
        """Write a remote step's result reported by a worker, outside any lease; wake the run.

        Applies when the run is active and its record at ``seq`` is ``running`` with
        ``attempts == attempt`` and a ``fence`` no newer than the result's (the result's task
        was the record's last dispatch; ``fence=None``, a worker that sends none, or a record
        without one: by attempt only): the record becomes ``completed`` with ``output``, or, for a
        failed attempt, ``pending`` with ``error`` and no ``wake_at`` (the next turn decides on
        a retry); ``finished_at = now``; then the run is woken. Returns ``"recorded"``.
        ``"duplicate"``: the record already left ``running`` for that attempt; nothing is
        written, but a suspended run is woken all the same (whoever settled the step may have
        died before waking it). ``"dropped"``: unknown or terminal run, no such record, a
        stale attempt, or a stale fence (``models.older_fence``: the step was sent again since);
        nothing written.
        """
        ...

    async def record_heartbeat(
        self, run_id: str, seq: int, attempt: int, at: datetime, *, fence: int | None = None
    ) -> bool:
        """Set ``last_heartbeat_at = at`` on the ``running`` record at ``seq`` for ``attempt``.

        False (nothing written) when there is no such record, the run is terminal, or the beat's
        ``fence`` is older than the record's (``models.older_fence``).
        """
        ...

    # ---------------------------------------------------------------- remote workflow turns

    async def await_decision(
        self, run_id: str, owner: str, task_id: str, deadline: datetime, now: datetime
    ) -> None:
        """Park a leased run while a worker decides its turn, in one fenced write.

        The run becomes ``suspended`` with ``awaiting_decision_task_id = task_id`` and
        ``wake_at = deadline`` (the turn is sent again when no decision or beat came by then);
        the lease is released. ``wake_requested_at`` is kept: a wake that landed during the
        lease is newer than the task's snapshot. The caller sends the task only after this
        returns, so a decision can be claimed on any instance as soon as it exists.

        A run asked to pause during the turn (``pause_requested_at``) is parked ``paused``
        instead, with no task awaited, and :class:`RunPausing` is raised once that is written:
        the caller sends no task.
        """
        ...

    async def claim_decision(
        self,
        run_id: str,
        task_id: str,
        owner: str,
        now: datetime,
        lease_until: datetime,
        *,
        serves: Serves | None = None,
    ) -> Claim | None:
        """Lease a run to apply the decision of ``task_id``, atomically.

        Only a ``suspended`` run whose ``awaiting_decision_task_id`` is ``task_id``: it becomes
        ``running`` under ``owner`` until ``lease_until``, the marker and ``wake_at`` are
        cleared in the same write; ``wake_requested_at`` is kept (a wake that landed while the
        turn was out makes the apply's suspend rewake). Returns the claim as :meth:`claim_run`
        does. ``None`` and nothing written otherwise: a duplicate or stale decision, a run
        cancelled, finished or requeued meanwhile, an unknown run, a run whose code ``serves``
        does not cover.
        """
        ...

    async def extend_decision(self, run_id: str, task_id: str, deadline: datetime) -> bool:
        """Push the deadline of the outstanding turn ``task_id`` (``wake_at``) to ``deadline``.

        Applies only while the run is ``suspended`` awaiting ``task_id`` and only forward;
        returns whether it applied.
        """
        ...

    # ---------------------------------------------------------------- turn writes (fenced)

    async def checkpoint(
        self, run_id: str, owner: str, writes: Writes, now: datetime
    ) -> list[Started]:
        """Persist step records (upsert by seq), mark signals consumed and create child runs.

        One transaction; fenced. Children are created exactly as :meth:`create_runs` does,
        with ``parent_id`` as given in their specs; the results are returned in order.

        When a pause was asked of the run (``pause_requested_at``), the writes go through all
        the same and then :class:`~runlane.errors.RunPausing` is raised (its ``started``: the
        results): the turn starts no further step.
        """
        ...

    async def set_attributes(
        self,
        run_id: str,
        owner: str,
        writes: Writes,
        attributes: Mapping[str, AttributeValue],
        now: datetime,
    ) -> None:
        """Persist ``writes`` (step records, consumed signals; never children) and merge
        ``attributes`` into the run's: a key set again takes the new value, the others stay.

        One transaction, fenced as :meth:`checkpoint` is: a lost lease raises
        ``LeaseLostError``, a cancellation ``RunCancelling``, and nothing is written. From the
        commit on, listings filtered by the new attributes find the run.
        """
        ...

    async def suspend_run(
        self,
        run_id: str,
        owner: str,
        writes: Writes,
        wake_at: datetime | None,
        now: datetime,
        *,
        blocked: bool = False,
    ) -> bool:
        """Flush ``writes`` and park the run ``suspended`` with ``wake_at``; release the lease.
        ``blocked``: it waits for admission (a step-queue slot), and is parked ``blocked``.

        Fenced. Returns True when a wake arrived during the turn (``wake_requested_at`` set):
        the run is then left due now (``wake_at = now``) so it is not lost. A run a pause was
        asked of during the turn is parked ``paused`` instead (``models.suspended_run``; the
        request is consumed, and False returned).
        """
        ...

    async def settle_run(
        self,
        run_id: str,
        owner: str,
        writes: Writes,
        settlement: Settlement,
        now: datetime,
        *,
        successor: Lease | None = None,
        queued: bool = False,
        keyed: bool = True,
    ) -> SettleResult:
        """Flush ``writes`` and finish the run with a terminal status; release the lease.

        Fenced. A ``cancelling`` run settles only ``cancelled``: any other settlement of it
        raises :class:`RunCancelling` and writes nothing (the turn then settles it cancelled,
        discarding its records: once a cancel was accepted, the body's outcome does not count).
        In the same transaction: the singleton slot is
        released and the oldest waiters for the freed slots are woken; the parent is woken; a
        ``continue_as`` spec is created (without gates). ``woken`` lists the ids woken or
        created, so the caller may run them at once.

        A ``failed`` or ``dead`` settlement counts one more of the run's ``failures``. Its
        ``handler`` spec (the failure handler's run) is created in the same transaction, after
        the settlement (so the run no longer counts against a quota or holds a slot), exactly as
        :meth:`create_runs` creates a spec: through its gates, an existing id found and not
        created again, ``waiting`` behind a full singleton key. ``SettleResult.handler`` is that
        start's :class:`Started`; a created run that is not waiting is in ``woken``. A refused
        start writes no handler run and sets ``error["handler_error"]`` on the settled run
        (``models.with_handler_error``); the run settles all the same.

        With ``successor``, the oldest waiter the release admits, if it is not leased (pending,
        suspended or blocked), is claimed in the same transaction: it holds the slot, is leased
        to ``successor.owner`` until ``successor.until``, and comes back as ``successor`` (a
        claim exactly as :meth:`claim_run` returns one) instead of in ``woken``; with
        ``successor.serves``, only a waiter of one of those codes (another is woken). Stores may
        grant it only where the settlement needs no children, continuation or handler written.

        A run that entered a step queue has its entries deleted and their queues' next waiters
        woken (in ``woken``): in this transaction when the caller says ``queued`` (the turn
        knows), else in this one or one of the store's own after it (the entries of a settled
        run count for nothing either way).

        ``keyed=False``: the caller knows the run has no singleton key (a store that locks the
        key may skip looking for one).
        """
        ...

    # ---------------------------------------------------------------- step queues

    async def register_queues(self, settings: Sequence[QueueSettings], now: datetime) -> None:
        """Insert or update step queues' settings (the last registration's numbers are what
        every engine enforces); a queue's entries, rate window and fairness history stay."""
        ...

    async def admit_step(
        self,
        run_id: str,
        owner: str,
        writes: Writes,
        request: QueueRequest,
        now: datetime,
        retry: RetryTimer,
        *,
        release: Sequence[int] = (),
    ) -> Admission:
        """Flush ``writes``, release the run's entries at ``release`` as
        :meth:`release_steps` does (their woken waiters join ``woken``), and ask the step queue
        ``request.queue`` to admit the step at ``request.seq``, atomically, fenced like
        :meth:`checkpoint`. The queue's row is locked, so admissions of one queue from every
        engine are decided one after the other.

        An unregistered queue raises ``DefinitionError`` and writes nothing. Otherwise the run
        is marked ``queued`` and the step's entry is found or added (waiting, its arrival after
        every entry so far). An entry already holding a slot is admitted again (a replay after
        an outage). Else, with ``room`` = the least of the free slots (``concurrency`` minus
        the slots held by entries of unsettled runs) and what is left of the current fixed rate
        window (aligned on the epoch), the step is admitted when its entry is among the first
        ``room`` waiting entries of unsettled runs in the queue's order: it then holds a slot
        from ``now``, the window counts it, and its fairness key is marked served last.
        Denied, its entry counts a denial; ``retry_at`` is the next window's start when the
        window is used up, else ``step_queues.fallback(retry, now, denials before this one)``; and
        the runs of the first ``room`` waiters are woken (``woken``, this run left out).
        """
        ...

    async def release_steps(
        self, run_id: str, owner: str, writes: Writes, seqs: Sequence[int], now: datetime
    ) -> list[str]:
        """Flush ``writes`` (the attempts' records) and delete the run's entries at ``seqs``,
        fenced, in one transaction; then wake the first waiters of their queues the free room
        is for. Returns the ids woken (this run left out).

        Entries are released the same way, in the same transaction, when a worker's result is
        recorded (:meth:`record_step_result`, the entry at its seq), when the run settles (all
        of its entries: ``settle_run(queued=True)`` does it in the settling transaction where a
        store would otherwise do it in one of its own) and when an expired lease is recovered
        (the entries holding a slot: the replay asks again)."""
        ...

    # ---------------------------------------------------------------- from outside a turn

    async def pause_run(self, run_id: str, now: datetime) -> bool:
        """Pause a run, atomically (``models.paused_run``): one a turn holds (``running``) or
        whose remote turn is out gets ``pause_requested_at = now`` and pauses at that turn's
        next write; any other active run becomes ``paused`` now, keeping its wake time, its
        slots and its step queue entries. A claim of a run asked to pause (its lease expired
        before the turn's next write) parks it ``paused`` instead of leasing it. A paused run
        is claimed by nothing; wakes, signals, events and remote results that come meanwhile
        are recorded as usual and found by the turn after its resume.

        False (nothing written) when there is nothing to pause (``models.pausable``: terminal,
        cancelling, paused or asked to already); :class:`RunNotFoundError` for an unknown run.
        """
        ...

    async def resume_run(self, run_id: str, now: datetime) -> bool:
        """Resume a run, atomically (``models.resumed_run``): a paused run is due now (a
        singleton waiter without its slot ``blocked``, to be admitted in its turn); a pause asked
        but not taken yet is withdrawn. False (nothing written) when the run is neither;
        :class:`RunNotFoundError` for an unknown run."""
        ...

    async def deliver_signal(
        self,
        run_id: str,
        name: str,
        payload: object,
        now: datetime,
        *,
        kind: StepKind = StepKind.SIGNAL,
    ) -> bool:
        """Buffer a signal for a run and wake it if it waits for ``name``.

        ``kind`` says which wait takes it: a signal (``wait_for_signal``), or an update
        (``wait_for_update``: ``kind=StepKind.UPDATE``). The message is buffered among the
        run's signals under ``buffered_name(kind, name)`` (an update's name gets the prefix
        ``$update:``), and the run is woken when it has a pending step record of that kind
        named ``name``. A run leased to a turn (or awaiting a remote decision) is woken all
        the same (``wake_requested_at``): that turn may have read its signals before this one.

        Raises ``RunNotFoundError`` for an unknown run and ``RunFinishedError`` for a terminal
        one, writing nothing. Returns True when the run was woken for its wait.
        """
        ...

    async def cancel_run(
        self, run_id: str, now: datetime, error: dict[str, object] | None
    ) -> CancelResult:
        """Cancel a run and its active descendants; return the ids whose status changed, and
        the runs the cancellation woke.

        Leased runs go to ``cancelling`` (their turn settles them); the others settle
        ``cancelled`` at once, with the same effects as :meth:`settle_run`: a slot of a
        singleton key they held is released, the oldest waiters for the key's free slots are
        woken (also after a waiter, which may have been woken for a slot and now will not
        take it), and so is a parent; those ids are ``woken``, for the caller to run now. Raises
        ``RunNotFoundError`` for an unknown id; a terminal run changes nothing.
        """
        ...

    async def requeue_run(
        self,
        run_id: str,
        now: datetime,
        deadline_at: datetime | None,
        *,
        quota: QuotaGate | None = None,
        singleton: SingletonGate | None = None,
    ) -> Run:
        """Put a ``failed``/``dead``/``cancelled`` run back to ``pending``.

        A requeue is a start as far as the gates go, atomically as in :meth:`create_runs`:
        ``quota`` over its limit raises ``ConcurrencyLimitError``, ``singleton``'s backlog full
        raises ``SingletonQueueFullError``, and nothing changes.
        Completed checkpoints are kept; other step records are dropped so they execute again.
        Error, output, lease, recoveries and slot are cleared (a singleton run claims again).
        Raises ``RunNotFoundError`` or ``RunlaneError`` for a run that is not requeueable.
        """
        ...

    async def publish_event(
        self, name: str, payload: object, event_id: str | None, now: datetime
    ) -> tuple[Event, bool, list[str]]:
        """Record an event (idempotent by ``event_id``) and wake runs waiting for ``name``.

        Returns ``(event, created, woken_ids)``; a duplicate id returns the first event,
        ``created=False`` and wakes nothing.
        """
        ...

    async def events_after(self, name: str, after_seq: int, limit: int) -> list[Event]:
        """Events named ``name`` with ``seq > after_seq``, oldest first."""
        ...

    async def latest_event_seq(self) -> int:
        """The highest event seq so far (0 when there is none)."""
        ...

    # ---------------------------------------------------------------- schedules

    async def save_schedule(self, schedule: StoredSchedule) -> StoredSchedule:
        """Insert a schedule, or replace an existing one's definition, pause flag and timing
        (``next_window_at``, ``next_fire_at``) and ``updated_at``; an existing one keeps its
        ``created_at`` and its last fire (``last_*``). Returns the schedule as stored."""
        ...

    async def get_schedule(self, schedule_id: str) -> StoredSchedule | None:
        """The schedule, or None."""
        ...

    async def list_schedules(self) -> list[StoredSchedule]:
        """Every schedule, by id."""
        ...

    async def delete_schedule(self, schedule_id: str) -> bool:
        """Delete the schedule; False when there was none. Runs it started stay."""
        ...

    async def due_schedules(
        self, now: datetime, limit: int, *, workflows: Collection[str] | None = None
    ) -> list[StoredSchedule]:
        """At most ``limit`` schedules not paused whose ``next_fire_at <= now``, earliest first:
        one indexed query, never a scan of every schedule. ``workflows``: only the schedules
        of those workflows (an engine fires the windows of the workflows it serves)."""
        ...

    async def fire_schedule(
        self,
        schedule_id: str,
        *,
        expected: datetime,
        next_window: datetime,
        next_fire: datetime,
        specs: Sequence[RunSpec],
        now: datetime,
        window: datetime | None,
    ) -> list[Started] | None:
        """Fire a window, atomically: only while the schedule is not paused and its
        ``next_window_at`` is still ``expected`` (compare-and-set), create ``specs`` exactly as
        :meth:`create_runs` does (gated, idempotent by id), move ``next_window_at`` and
        ``next_fire_at`` to ``next_window`` and ``next_fire``, and record the fire:
        ``last_fire_at = now`` and, when ``specs`` are given, ``last_run_id`` and
        ``last_error`` as ``admission.last_fire`` makes them of the results (``window`` names the
        window in a refusal). Returns the specs' results in order; None, writing nothing, when
        the compare failed (another engine fired it, or it was paused or redefined).
        """
        ...

    async def fire_windows(
        self, fires: Sequence[WindowFire], now: datetime
    ) -> list[list[Started] | None]:
        """Fire many schedules' windows (distinct schedules) in one atomic unit: each fire
        exactly as :meth:`fire_schedule` with ``specs=[fire.spec]`` (or none) and
        ``window=fire.window``, in order, one result per fire in order. A fire whose compare
        fails yields None and writes nothing; the other fires of the batch are unaffected.

        Two engines firing overlapping batches at once create each window's run once: a store
        that locks schedules takes them in id order (one waits for the other, then finds the
        windows fired). Stores may write a batch whose runs are ungated (no gate counts them)
        as a few set-based statements.
        """
        ...

    # ---------------------------------------------------------------- retention

    async def prune_runs(self, cutoffs: Mapping[RunStatus, datetime], limit: int) -> list[str]:
        """Delete at most ``limit`` terminal runs, oldest ``updated_at`` first, each with all it
        owns (step records, buffered signals, step-queue entries), in one transaction; return
        the ids deleted (``[]`` when nothing is due).

        A run is due when its status is a key of ``cutoffs`` (only terminal statuses are
        honoured) and its ``updated_at`` is before that status's cutoff, and no child of it
        (``parent_id``) is still active: a parent stays until its children settle. Children
        already settled are not deleted with it; they are due on their own terms. A run that
        another transaction holds is left for a later call (PostgreSQL skips it), so a prune
        never waits behind a turn. Idempotent: a run already deleted is simply not returned.
        """
        ...

    async def prune_events(self, before: datetime, limit: int) -> int:
        """Delete at most ``limit`` published events (the engine's event log) whose
        ``created_at`` is before ``before``, lowest seq first, in one transaction; return how
        many were deleted (0 when nothing is due).

        Kept whatever their age: the newest event, so :meth:`latest_event_seq` keeps its value
        and seqs are never reused; and every event a pending event wait may still read (a step
        record of kind ``event``, ``pending``, reads the events after its ``input["after"]``).
        Once an event is gone, its ``event_id`` no longer deduplicates (a publish with it
        records a new event).
        """
        ...

    # ---------------------------------------------------------------- engines

    async def announce_engine(self, info: EngineInfo) -> None:
        """Record (or replace) the engine ``info.id``: what it serves, its first beat."""
        ...

    async def beat_engine(self, engine_id: str, at: datetime) -> bool:
        """Set the engine's ``last_beat_at = at``; False (nothing written) when it has no
        record (it was pruned, or removed: the caller announces itself again)."""
        ...

    async def remove_engine(self, engine_id: str) -> None:
        """Delete the engine's record (it stopped cleanly). Idempotent."""
        ...

    async def prune_engines(self, before: datetime) -> int:
        """Delete the records of engines whose last beat is before ``before``; how many."""
        ...

    # ---------------------------------------------------------------- the audit log

    async def append_audit(self, entry: AuditEntry) -> AuditEntry:
        """Append ``entry`` to the audit log and return it with its ``id``: greater than every
        entry's appended before it (on this store), never reused. Entries are never changed,
        and no pruning removes them."""
        ...

    async def get_reply(self, run_id: str, update_id: str) -> StepRecord | None:
        """The run's answer to the update ``update_id``: its step record of kind ``reply``
        whose input's ``"update"`` is that id (completed: the reply's value is its output;
        failed: a rejection, its error's ``message`` the reason), the lowest seq if several;
        None when there is none, or no such run."""
        ...
