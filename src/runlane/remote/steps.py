"""The turn's side of a remote step: record the attempt, send its task, and wait for its result.

A remote step's attempt is recorded ``running`` (a checkpoint) before its task is sent, so a
result can always be matched to it. Without a ``timeout`` the run then suspends durably; with
one the turn waits in memory for the result ``dispatch.RemoteDispatch`` takes off the
transport, and when the liveness window runs out the checkpoint is read again before anything
is declared dead. A turn sends a step at most once: a re-send of a task this turn sent already
ends the turn (due at once), and the claim that follows sends it under the next fence.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..errors import Abandon, Cancelling, StepTimeoutError, error_dict, is_fatal, raise_stored
from ..models import JSON, RunStatus, Settled, StepKind, StepRecord, StepStatus
from ..transports.base import Message
from ..transports.messages import PROTOCOL
from .dispatch import RemoteDispatch, persist_throttle, redispatch_window, step_id

if TYPE_CHECKING:
    from ..context import StepOp
    from ..options import EngineOptions
    from ..turn import Turn


class RemoteSteps:
    """The remote-step driver an engine hands its turns (``turn.RemoteStepDriver``): each
    remote step goes out through the engine's ``RemoteDispatch``."""

    def __init__(self, dispatch: RemoteDispatch) -> None:
        self.dispatch = dispatch

    async def settle(self, turn: Turn, op: StepOp) -> Settled | None:
        return await settle_remote_step(turn, op, self.dispatch)


async def settle_remote_step(turn: Turn, op: StepOp, remote: RemoteDispatch) -> Settled | None:
    """Dispatch one remote step, or follow its attempt in flight (a step with a recorded
    outcome is replayed by the turn, ``Turn.settle_step``); None means the run suspends
    (durably) for now."""
    record = turn.recorded(op.seq, StepKind.STEP, op.name)
    if record is not None and record.status == StepStatus.RUNNING:
        return await _in_flight(turn, op, remote, record)
    if record is not None and record.error is not None and record.wake_at is None:
        return _attempt_failed(turn, op, record, record.error)
    if record is not None and record.wake_at is not None and record.wake_at > turn.now():
        turn.wake_by(record.wake_at)
        return None
    if op.definition.queue is not None and not await turn.admit(op):
        return None  # its queue admits it later; the slot is held until its result is recorded
    return await _dispatch(turn, op, remote, record, (record.attempts if record else 0) + 1)


async def _dispatch(
    turn: Turn, op: StepOp, remote: RemoteDispatch, prior: StepRecord | None, attempt: int
) -> Settled | None:
    now = turn.now()
    record = _running(turn, op, prior, attempt, dispatches=1, started=now)
    turn.stage(record)
    await turn.flush()  # the attempt is durable before any worker can answer it
    return await _send_and_wait(turn, op, remote, record)


def _running(
    turn: Turn,
    op: StepOp,
    prior: StepRecord | None,
    attempt: int,
    *,
    dispatches: int,
    started: datetime,
) -> StepRecord:
    return StepRecord(
        run_id=turn.run.id,
        seq=op.seq,
        name=op.name,
        kind=StepKind.STEP,
        status=StepStatus.RUNNING,
        input=op.input,
        attempts=attempt,
        started_at=started,
        last_heartbeat_at=prior.last_heartbeat_at if prior and prior.attempts == attempt else None,
        wake_at=_next_check(turn, op, started),
        dispatches=dispatches,
        fence=turn.fence,
    )


def _next_check(turn: Turn, op: StepOp, since: datetime) -> datetime:
    options = turn.host.options
    window = redispatch_window(options)
    return since + timedelta(seconds=min(window, options.reconcile_interval))


def _out_of_dispatches(options: EngineOptions, record: StepRecord) -> bool:
    limit = options.remote_redispatch_max
    return limit is not None and record.dispatches > limit


class _SendAgain(Exception):
    """A task this turn sent already is to be sent again: it needs a newer fence than this
    turn's, so the turn ends (due at once) and the next claim of the run sends it."""


def _sent_by(turn: Turn, record: StepRecord) -> bool:
    """Whether ``record``'s dispatch went out under this turn's fence (this turn sent it)."""
    return record.fence is not None and record.fence >= turn.fence


async def _redispatched(turn: Turn, op: StepOp, record: StepRecord) -> StepRecord:
    """The same attempt recorded as sent once more, durably before it is sent, under this
    turn's fence; ``_SendAgain`` when this turn sent it already (a step is sent at most once
    under a fence)."""
    if _sent_by(turn, record):
        raise _SendAgain()
    again = _running(
        turn, op, record, record.attempts, dispatches=record.dispatches + 1, started=turn.now()
    )
    turn.stage(again)
    await turn.flush()
    return again


def _task(turn: Turn, op: StepOp, record: StepRecord) -> Message:
    trace = turn.host.tracing.carrier()
    return {
        **({"trace": trace} if trace else {}),
        "protocol": PROTOCOL,
        "step_id": step_id(turn.run.id, op.seq),
        "run_id": turn.run.id,
        "seq": op.seq,
        "name": op.name,
        "group": op.definition.group,
        "input": op.input,
        "attempt": record.attempts,
        "fence": record.fence,
        "dispatched_at": turn.now().isoformat(),
    }


async def _send(turn: Turn, op: StepOp, remote: RemoteDispatch, record: StepRecord) -> None:
    """Send the attempt's task to its group. A task is sent like a step starts: an engine
    frozen between the checkpoint that records the attempt as sent and the send, past its
    lease, must not send it once its run was taken over (and perhaps settled): a worker would
    run the step again, late."""
    await turn.ensure_lease()
    await remote.dispatch(str(op.definition.group), _task(turn, op, record))


async def _send_and_wait(
    turn: Turn, op: StepOp, remote: RemoteDispatch, record: StepRecord
) -> Settled | None:
    timeout = op.definition.timeout
    if timeout is None:
        await _send(turn, op, remote, record)
        turn.wake_by(record.wake_at or turn.now())
        return None
    first = min(timeout, redispatch_window(turn.host.options))
    return await _watched(turn, op, remote, record, timeout, first=first, send=True)


async def _watched(
    turn: Turn,
    op: StepOp,
    remote: RemoteDispatch,
    record: StepRecord,
    timeout: float,
    *,
    first: float,
    send: bool = False,
) -> Settled | None:
    """Wait in memory for an attempt's result (sending its task first when ``send``)."""
    watch = _Watch(turn, op, remote, record, timeout)
    try:
        # Expect before sending: the beat a worker sends as it takes the task must not be missed.
        with remote.expecting(watch.key, record) as waiter:
            if send:
                await watch.send()
            result = await watch.result(waiter, first)
    except _SendAgain:
        turn.wake_by(turn.now())
        return None
    return _resolve(turn, op, watch.record, result)


class _Watch:
    """The in-memory wait for one attempt of a remote step with a ``timeout``.

    Until a worker takes the task (a beat heard here, or persisted by another instance for this
    attempt) it is only queued and the liveness window does not run: the checkpoint is read every
    ``timeout`` seconds, and the task is re-sent when nobody took it for the redispatch window.
    Once it is taken, silence longer than ``timeout`` everywhere ends the wait.
    """

    def __init__(
        self, turn: Turn, op: StepOp, remote: RemoteDispatch, record: StepRecord, timeout: float
    ) -> None:
        self.turn = turn
        self.op = op
        self.remote = remote
        self.record = record  # a re-send replaces it (one more dispatch of the same attempt)
        self.timeout = timeout
        self.key = (step_id(turn.run.id, op.seq), record.attempts)

    async def send(self) -> None:
        await _send(self.turn, self.op, self.remote, self.record)

    async def result(self, waiter: asyncio.Future[Message], first: float) -> Message | None:
        """The worker's (or the checkpoint's) result; None when the worker fell silent.

        Each time the wait runs out the checkpoint is read first: a result another instance
        recorded ends the wait even while beats keep it going, and so does a cancellation made
        elsewhere (one made here interrupts the wait at once: ``RemoteDispatch.interrupt``).
        """
        wait = first
        while True:
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    return await asyncio.wait_for(asyncio.shield(waiter), wait)
            stored = await self.turn.io(
                self.turn.host.store.get_step(self.turn.run.id, self.op.seq)
            )
            if stored is not None and stored.status != StepStatus.RUNNING:
                return _stored_result(stored)
            if waiter.done():  # it landed while the checkpoint was read
                return waiter.result()
            await self._still_ours()
            if self._taken(stored):
                wait = self._alive_for(stored)
                if wait <= 0:
                    return None
            else:
                queued = await self._queued()
                if queued is None:
                    return self._not_taken()
                wait = queued

    async def _still_ours(self) -> None:
        """Waiting on is pointless for a run cancelled meanwhile (it settles cancelled now) or
        taken over by another instance (this turn's writes would be refused)."""
        turn = self.turn
        run = await turn.io(turn.host.store.get_run(turn.run.id))
        if run is None or run.lease_owner != turn.owner:
            raise Abandon()
        if run.status == RunStatus.CANCELLING:
            raise Cancelling()

    def _taken(self, stored: StepRecord | None) -> bool:
        if self.remote.taken(self.key):
            return True
        return (
            stored is not None
            and stored.attempts == self.record.attempts
            and stored.last_heartbeat_at is not None
        )

    def _alive_for(self, stored: StepRecord | None) -> float:
        """Seconds of silence the worker still has, from beats heard here or persisted elsewhere."""
        heard = self.remote.heard_at(self.key) + self.timeout - time.monotonic()
        missed = not _heard_here(self.remote.last_beat(self.key), stored)
        return max(heard, _persisted_grace(self.turn, stored, self.timeout, allowance=missed))

    async def _queued(self) -> float | None:
        """Seconds until a task nobody took is looked at again (re-sent if due); None: give up."""
        options = self.turn.host.options
        window = redispatch_window(options)
        due = window - _since(self.turn, self.record.started_at)
        if due <= 0:
            if _out_of_dispatches(options, self.record):
                return None
            self.record = await _redispatched(self.turn, self.op, self.record)
            self.remote.expect_dispatch(self.key, self.record)
            await self.send()
            due = window
        return min(self.timeout, due)

    def _not_taken(self) -> Message:
        error = StepTimeoutError(
            f"no worker took remote step {self.op.name!r} after {self.record.dispatches} dispatches"
        )
        return {"ok": False, "error": error_dict(error, with_traceback=False)}


def _stored_result(stored: StepRecord) -> Message:
    return {
        "ok": stored.status == StepStatus.COMPLETED,
        "output": stored.output,
        "error": stored.error,
    }


SAME_BEAT = 0.5
"""Seconds within which two instances stamp one broadcast beat (delivery and clock skew
between them): a beat persisted no later than this after the last beat heard here is one this
instance heard too."""


def _heard_here(last: datetime | None, stored: StepRecord | None) -> bool:
    """Whether the last beat persisted for the attempt (if any) was heard here as well."""
    if stored is None or stored.last_heartbeat_at is None:
        return True
    return last is not None and stored.last_heartbeat_at <= last + timedelta(seconds=SAME_BEAT)


def _persisted_grace(
    turn: Turn, stored: StepRecord | None, timeout: float, *, allowance: bool
) -> float:
    """Seconds of silence still allowed because another instance persisted a recent beat.

    That instance persists at most one beat per ``persist_throttle``: a worker beating
    all along may have been heard that long after the last persisted beat, so a dispatcher that
    did not hear that beat itself allows one throttle more (seed 003, rule 3). A dispatcher that
    heard it (every instance hears every beat) gets no ``allowance``: it knows the worker's last
    sign of life itself, and a dead worker is detected within ``timeout``.
    """
    if stored is None or stored.last_heartbeat_at is None:
        return 0.0
    window = timeout + (persist_throttle(turn.host.options) if allowance else 0.0)
    return window - (turn.now() - stored.last_heartbeat_at).total_seconds()


def _resolve(turn: Turn, op: StepOp, record: StepRecord, result: Message | None) -> Settled | None:
    if result is None:
        error = error_dict(
            StepTimeoutError(
                f"remote step {op.name!r} sent no result or heartbeat for {op.definition.timeout}s"
            )
        )
        return _attempt_failed(turn, op, record, error)
    if result.get("ok"):
        output: JSON = result.get("output")
        turn.complete(
            op.seq,
            StepKind.STEP,
            op.name,
            output,
            record,
            input=op.input,
            attempts=record.attempts,
            fence=record.fence,
        )
        return Settled(True, output)
    return _attempt_failed(turn, op, record, dict(result.get("error") or {}))


def _attempt_failed(
    turn: Turn, op: StepOp, record: StepRecord, error: dict[str, Any]
) -> Settled | None:
    retry_in = op.retry.retry_in(record.attempts, is_fatal(error))
    if retry_in is not None:
        wake = turn.now() + timedelta(seconds=retry_in)
        turn.stage(_pending_retry(record, error, wake, turn.now()))
        turn.wake_by(wake)
        return None
    turn.stage(_failed(record, error, turn.now()))
    turn.keep_error(op.seq, raise_stored(error))
    return Settled(False, None, error)


def _pending_retry(
    record: StepRecord, error: dict[str, Any], wake: datetime, now: datetime
) -> StepRecord:
    return replace(record, status=StepStatus.PENDING, error=error, wake_at=wake, finished_at=now)


def _failed(record: StepRecord, error: dict[str, Any], now: datetime) -> StepRecord:
    return replace(record, status=StepStatus.FAILED, error=error, wake_at=None, finished_at=now)


async def _in_flight(
    turn: Turn, op: StepOp, remote: RemoteDispatch, record: StepRecord
) -> Settled | None:
    """A dispatched attempt with no result yet (this turn was woken, or another instance died)."""
    timeout = op.definition.timeout
    if timeout is not None:
        return await _watch_again(turn, op, remote, record, timeout)
    options = turn.host.options
    last = _last_sign(turn, record)
    silent = _since(turn, last)
    window = options.remote_redispatch
    if window is None or silent < window:
        # Looked at again when the attempt may be re-sent, and never later than the reconcile
        # interval (every recheck, not only the first).
        wake = _next_check(turn, op, turn.now())
        if window is not None:
            wake = min(wake, last + timedelta(seconds=window))
        turn.wake_by(wake)
        return None
    if _out_of_dispatches(options, record):
        return _attempt_failed(turn, op, record, _timed_out(op, silent))
    try:
        again = await _redispatched(turn, op, record)
    except _SendAgain:
        turn.wake_by(turn.now())
        return None
    return await _send_and_wait(turn, op, remote, again)


async def _watch_again(
    turn: Turn, op: StepOp, remote: RemoteDispatch, record: StepRecord, timeout: float
) -> Settled | None:
    """Keep watching an attempt another turn sent (its instance is gone)."""
    if record.last_heartbeat_at is None:
        # No worker took it yet as far as anyone recorded: queued time is not silence, so the
        # rules for an untaken task apply, counted from its last dispatch.
        return await _watched(turn, op, remote, record, timeout, first=0.0)
    silent = _since(turn, _last_sign(turn, record))
    if silent >= timeout:
        return _attempt_failed(turn, op, record, _timed_out(op, silent))
    return await _watched(turn, op, remote, record, timeout, first=timeout - silent)


def _since(turn: Turn, at: datetime | None) -> float:
    return (turn.now() - at).total_seconds() if at is not None else 0.0


def _last_sign(turn: Turn, record: StepRecord) -> datetime:
    """When the attempt was last sent, or last heard from (a beat another instance persisted)."""
    sent = record.started_at or turn.now()
    return max(sent, record.last_heartbeat_at or sent)


def _timed_out(op: StepOp, silent: float) -> dict[str, Any]:
    return error_dict(
        StepTimeoutError(f"remote step {op.name!r} silent for {silent:.1f}s"), with_traceback=False
    )
