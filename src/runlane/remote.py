"""Remote steps: dispatch to a worker group, and take results and heartbeats back.

A remote step's attempt is recorded ``running`` (a checkpoint) before its task is sent, so a
result can always be matched to it. Without a ``timeout`` the run then suspends durably and the
result, taken by whichever instance consumes it, is written with ``record_step_result`` and wakes
the run. With a ``timeout`` the turn waits in memory inside a liveness window that heartbeats
re-arm; when the window runs out, the checkpoint is read again before anything is declared dead.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from .errors import StepTimeoutError, error_dict, raise_stored
from .models import JSON, Settled, StepKind, StepRecord, StepStatus
from .runqueue import RateLimitedLog
from .transports.base import Message, Transport

if TYPE_CHECKING:
    from .context import StepOp
    from .engine import Engine
    from .turn import Turn

log = logging.getLogger("runlane.remote")

Key = tuple[str, int]  # (step id, attempt)
RESULT_BATCH = 64
STOP_TIMEOUT = 5.0  # a consumer stuck in a driver call is left behind rather than waited on
TAKE_TIMEOUT = 1.0


def step_id(run_id: str, seq: int) -> str:
    return f"{run_id}:{seq}"


class RemoteSteps:
    """One engine's side of remote steps: dispatches, in-memory waiters, results and beats."""

    def __init__(self, engine: Engine, transport: Transport) -> None:
        self.engine = engine
        self.transport = transport
        self._waiters: dict[Key, asyncio.Future[Message]] = {}
        self._heard: dict[Key, float] = {}  # monotonic time of the last beat heard, per waiter
        self._persisted: dict[Key, float] = {}  # monotonic time a beat was last written
        self._tasks: list[asyncio.Task[None]] = []
        self._failures = RateLimitedLog()
        # Loops check this too: a cancel landing inside a driver call can surface as that
        # driver's own error, and a loop that retries on errors would then never end.
        self._stopping = False

    def start(self) -> None:
        self._stopping = False
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._take_results(), name="runlane-results"),
                asyncio.create_task(self._hear_beats(), name="runlane-heartbeats"),
            ]

    async def stop(self) -> None:
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=STOP_TIMEOUT)
        self._tasks = []

    # ---------------------------------------------------------------- dispatch and waiting

    async def dispatch(self, group: str, task: Message) -> None:
        try:
            await self.transport.send_tasks(group, [task])
        except Exception as exc:
            # The attempt is recorded running; redispatch or reconcile re-sends it.
            self._failures.warning("dispatching %s failed (%s)", task.get("step_id"), exc)

    def expect(self, key: Key) -> asyncio.Future[Message]:
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._waiters[key] = future
        self._heard[key] = time.monotonic()
        return future

    def forget(self, key: Key) -> None:
        self._waiters.pop(key, None)
        self._heard.pop(key, None)

    def heard_at(self, key: Key) -> float:
        return self._heard.get(key, 0.0)

    # ---------------------------------------------------------------- consumers

    async def _take_results(self) -> None:
        while not self._stopping:
            try:
                results = await self.transport.take_results(RESULT_BATCH, TAKE_TIMEOUT)
            except Exception as exc:
                if self._stopping:
                    return
                self._failures.warning("taking step results failed (%s); retrying", exc)
                await asyncio.sleep(TAKE_TIMEOUT)
                continue
            for result in results:
                try:
                    await self._land(result)
                except Exception as exc:
                    self._failures.warning(
                        "landing result %s failed (%s)", result.get("step_id"), exc
                    )

    async def _land(self, result: Message) -> None:
        key = (str(result.get("step_id")), int(result.get("attempt") or 0))
        waiter = self._waiters.get(key)
        if waiter is not None and not waiter.done():
            waiter.set_result(result)
            return
        run_id, seq = str(result.get("run_id")), int(result.get("seq") or 0)
        outcome = await self.engine.store.record_step_result(
            run_id,
            seq,
            key[1],
            bool(result.get("ok")),
            result.get("output"),
            result.get("error"),
            self.engine.now(),
        )
        if outcome != "dropped":
            self.engine.wake([run_id])

    async def _hear_beats(self) -> None:
        while not self._stopping:
            try:
                async with self.transport.heartbeats() as feed:
                    async for beat in feed:
                        await self._heard_beat(beat)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._stopping:
                    return
                self._failures.warning("heartbeat feed failed (%s); resubscribing", exc)
                await asyncio.sleep(TAKE_TIMEOUT)

    async def _heard_beat(self, beat: Message) -> None:
        key = (str(beat.get("step_id")), int(beat.get("attempt") or 0))
        if key in self._waiters:
            self._heard[key] = time.monotonic()
            return
        throttle = self.engine.options.heartbeat_persist_throttle
        if time.monotonic() - self._persisted.get(key, -throttle) < throttle:
            return
        self._persisted[key] = time.monotonic()
        if len(self._persisted) > 10_000:
            self._persisted.clear()
        await self.engine.store.record_heartbeat(
            str(beat.get("run_id")), int(beat.get("seq") or 0), key[1], self.engine.now()
        )


# ---------------------------------------------------------------- the turn's side


async def settle_remote_step(turn: Turn, op: StepOp, remote: RemoteSteps) -> Settled | None:
    """Run or replay one remote step; None means the run suspends (durably) for now."""
    record = turn.recorded(op.seq, StepKind.STEP, op.name)
    if record is not None and record.status == StepStatus.COMPLETED:
        return Settled(True, record.output)
    if record is not None and record.status == StepStatus.FAILED:
        return Settled(False, None, record.error)
    if record is not None and record.status == StepStatus.RUNNING:
        return await _in_flight(turn, op, remote, record)
    if record is not None and record.error is not None and record.wake_at is None:
        return _attempt_failed(turn, op, record, record.error)
    if record is not None and record.wake_at is not None and record.wake_at > turn.now():
        turn.wakes.append(record.wake_at)
        return None
    return await _dispatch(turn, op, remote, record, (record.attempts if record else 0) + 1)


async def _dispatch(
    turn: Turn, op: StepOp, remote: RemoteSteps, prior: StepRecord | None, attempt: int
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
    )


def _next_check(turn: Turn, op: StepOp, since: datetime) -> datetime:
    options = turn.host.options
    window = options.remote_redispatch or options.reconcile_interval
    return since + timedelta(seconds=min(window, options.reconcile_interval))


async def _send_and_wait(
    turn: Turn, op: StepOp, remote: RemoteSteps, record: StepRecord
) -> Settled | None:
    task = {
        "step_id": step_id(turn.run.id, op.seq),
        "run_id": turn.run.id,
        "seq": op.seq,
        "name": op.name,
        "group": op.definition.group,
        "input": op.input,
        "attempt": record.attempts,
        "dispatched_at": turn.now().isoformat(),
    }
    key = (task["step_id"], record.attempts)
    if op.definition.timeout is None:
        await remote.dispatch(str(op.definition.group), task)
        turn.wakes.append(record.wake_at or turn.now())
        return None
    waiter = remote.expect(key)
    try:
        await remote.dispatch(str(op.definition.group), task)
        timeout = op.definition.timeout
        result = await _watch(turn, op, remote, key, waiter, timeout, timeout)
    finally:
        remote.forget(key)
    return _resolve(turn, op, record, result)


async def _watch(
    turn: Turn,
    op: StepOp,
    remote: RemoteSteps,
    key: Key,
    waiter: asyncio.Future[Message],
    timeout: float,
    first: float,
) -> Message | None:
    """Wait for the result while the worker is alive; None when it fell silent everywhere.

    Each time the window runs out the checkpoint is read first: a result another instance
    recorded ends the wait even while beats keep re-arming the window.
    """
    deadline = time.monotonic() + first
    while True:
        left = deadline - time.monotonic()
        if left > 0:
            try:
                return await asyncio.wait_for(asyncio.shield(waiter), left)
            except TimeoutError:
                pass
        stored = await turn.host.store.get_step(turn.run.id, op.seq)
        if stored is not None and stored.status != StepStatus.RUNNING:
            return {
                "ok": stored.status == StepStatus.COMPLETED,
                "output": stored.output,
                "error": stored.error,
            }
        heard = remote.heard_at(key)
        if heard + timeout > time.monotonic():
            deadline = heard + timeout
            continue
        extra = _persisted_grace(turn, stored, timeout)
        if extra <= 0:
            return None
        deadline = time.monotonic() + extra


def _persisted_grace(turn: Turn, stored: StepRecord | None, timeout: float) -> float:
    """Seconds of silence still allowed because another instance persisted a recent beat."""
    if stored is None or stored.last_heartbeat_at is None:
        return 0.0
    allowance = timeout + (turn.host.options.remote_advance_silence or 0.0)
    return allowance - (turn.now() - stored.last_heartbeat_at).total_seconds()


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
            op.seq, StepKind.STEP, op.name, output, record, input=op.input, attempts=record.attempts
        )
        return Settled(True, output)
    return _attempt_failed(turn, op, record, dict(result.get("error") or {}))


def _attempt_failed(
    turn: Turn, op: StepOp, record: StepRecord, error: dict[str, Any]
) -> Settled | None:
    retry_in = op.retry.retry_in(record.attempts, str(error.get("type")))
    if retry_in is not None:
        wake = turn.now() + timedelta(seconds=retry_in)
        turn.stage(_pending_retry(record, error, wake, turn.now()))
        turn.wakes.append(wake)
        return None
    turn.stage(_failed(record, error, turn.now()))
    turn.live_errors[op.seq] = raise_stored(error)
    return Settled(False, None, error)


def _pending_retry(
    record: StepRecord, error: dict[str, Any], wake: datetime, now: datetime
) -> StepRecord:
    return replace(record, status=StepStatus.PENDING, error=error, wake_at=wake, finished_at=now)


def _failed(record: StepRecord, error: dict[str, Any], now: datetime) -> StepRecord:
    return replace(record, status=StepStatus.FAILED, error=error, wake_at=None, finished_at=now)


async def _in_flight(
    turn: Turn, op: StepOp, remote: RemoteSteps, record: StepRecord
) -> Settled | None:
    """A dispatched attempt with no result yet (this turn was woken, or another instance died)."""
    options = turn.host.options
    now = turn.now()
    last = max(record.started_at or now, record.last_heartbeat_at or record.started_at or now)
    silent = (now - last).total_seconds()
    timeout = op.definition.timeout
    if timeout is not None:
        if silent < timeout:
            # The dispatching instance is gone; keep watching the same attempt here.
            return await _rewatch(turn, op, remote, record, timeout, timeout - silent)
        return _attempt_failed(turn, op, record, _timed_out(op, silent))
    window = options.remote_redispatch
    if window is None or silent < window:
        wake = _next_check(turn, op, now) if window is None else last + timedelta(seconds=window)
        turn.wakes.append(wake)
        return None
    if (
        options.remote_redispatch_max is not None
        and record.dispatches > options.remote_redispatch_max
    ):
        return _attempt_failed(turn, op, record, _timed_out(op, silent))
    resend = _running(
        turn, op, record, record.attempts, dispatches=record.dispatches + 1, started=now
    )
    turn.stage(resend)
    await turn.flush()
    return await _send_and_wait(turn, op, remote, resend)


async def _rewatch(
    turn: Turn, op: StepOp, remote: RemoteSteps, record: StepRecord, timeout: float, left: float
) -> Settled | None:
    key = (step_id(turn.run.id, op.seq), record.attempts)
    waiter = remote.expect(key)
    try:
        result = await _watch(turn, op, remote, key, waiter, timeout, left)
    finally:
        remote.forget(key)
    return _resolve(turn, op, record, result)


def _timed_out(op: StepOp, silent: float) -> dict[str, Any]:
    return error_dict(
        StepTimeoutError(f"remote step {op.name!r} silent for {silent:.1f}s"), with_traceback=False
    )
