"""The remote worker: takes a group's tasks off a transport, runs them, returns results.

A task is a remote step to run, or a remote workflow's turn (``"kind": "workflow"``) to
decide: the worker replays the body against the task's history (:mod:`runlane.remote.replay`) and
sends the decision back on the results queue, beating for the turn while it replays. The body
replays on a loop of its own in one of the worker's replay threads, so sync-heavy code in it
does not hold up this loop's beats and steps; the local steps it calls run on this loop.

A worker never touches the store. It runs up to ``concurrency`` steps at once, beats while each
runs so the dispatching instance knows it is alive, and on ``stop()`` or cancellation it takes
nothing more but finishes the steps in flight and sends their results.

Every task carries its fence (``runlane.fences``): the worker starts no step task whose fence is
not above the highest it has seen for that step, and no workflow task whose fence is not above
the highest it has seen for that run's turns (a task sent again since, or a copy delivered
twice); its results and beats carry the fence back.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
import uuid
from collections.abc import Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from .._version import __version__
from ..codecs import Codec
from ..concurrency import call_step_body, run_on_own_loop
from ..definitions import StepDefinition, step_definition
from ..errors import ConfigurationError, UnknownStepError, error_dict
from ..fences import FenceBook, StepContext, fence_of, within
from ..payloads import Payloads
from ..registry import Registry
from ..serialization import normalise
from ..tracing import Tracing
from ..transports.base import Message, Transport
from ..transports.encoded import WireCodec
from ..transports.messages import PROTOCOL, WORKER_KIND, Malformed, check
from .replay import Pulse, failed_decision, replay
from .tasks import (
    WORKFLOW_KIND,
    check_workflow_task,
    decision_doc,
    expired,
    reply_to,
    silence_window,
)

log = logging.getLogger(__name__)

# A result that cannot be sent (the transport is down, or restarting) is retried after these
# pauses, about two minutes in all, then given up: the engine's redispatch and reconcile
# passes cover a result that never arrives.
SEND_RETRY_DELAYS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)
TAKE_RETRY_DELAY = 1.0


class Worker:
    """Executes the remote steps of one ``group`` that arrive on ``transport``.

    ``codec``: the engines' codec (``Engine(codec=...)``). A task whose payloads it cannot
    decode (another key, or the worker has none) is answered with a failure naming its run
    (``PayloadCodecError``: the step fails and is not retried; a turn fails its run)."""

    def __init__(
        self,
        group: str,
        transport: Transport,
        steps: Iterable[Any] = (),
        concurrency: int = 8,
        workflows: Iterable[Any] = (),
        *,
        heartbeat_interval: float = 2.0,
        poll_timeout: float = 1.0,
        name: str | None = None,
        tracer_provider: Any = None,
        codec: Codec | None = None,
    ) -> None:
        if concurrency < 1:
            raise ConfigurationError("concurrency must be at least 1")
        if heartbeat_interval <= 0:
            raise ConfigurationError("heartbeat_interval must be positive")
        self.group = group
        self.transport = transport
        self.concurrency = concurrency
        self.heartbeat_interval = heartbeat_interval
        self.poll_timeout = poll_timeout
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.steps = {d.name: d for d in map(_definition, steps)}
        self.tracing = Tracing(tracer_provider)
        self.workflows = Registry(workflows)
        # The engines' codec: tasks are opened with it, results and decisions sealed.
        self.wire = WireCodec(Payloads(codec))
        self._stopping = asyncio.Event()
        self._stopped = asyncio.Event()
        self._running = False
        self._in_flight: set[asyncio.Task[None]] = set()
        self.fences = FenceBook()  # the highest fence seen per step and per run's turns

    async def run(self) -> None:
        """Take and execute tasks until ``stop()`` or cancellation, then drain."""
        await self.transport.open()
        self._running = True
        # One thread per task slot: a turn never waits for a thread, and the loop's default
        # executor stays free for the sync step bodies those turns call.
        replays = ThreadPoolExecutor(self.concurrency, thread_name_prefix="runlane-replay")
        announcing = asyncio.create_task(self._announce())
        try:
            while not self._stopping.is_set():
                await self._take_and_start(replays)
        finally:
            announcing.cancel()
            # Runs on cancellation too: a step in flight finishes and its result goes out.
            await asyncio.gather(*self._in_flight, return_exceptions=True)
            replays.shutdown(wait=False)
            self._running = False
            self._stopped.set()

    def descriptor(self) -> Message:
        """Who this worker is, which protocol it speaks, and what it runs (docs/wire.md)."""
        return {
            "protocol": PROTOCOL,
            "kind": WORKER_KIND,
            "worker": self.name,
            "group": self.group,
            "language": "python",
            "version": __version__,
            "workflows": self.workflows.workflow_names,
            "steps": sorted(self.steps),
            "concurrency": self.concurrency,
            "at": _now(),
        }

    async def _announce(self) -> None:
        """Tell every engine listening who joined the group, when it starts and again every
        ``ANNOUNCE_EVERY`` heartbeat intervals (for engines that start later); an engine that
        does not speak this worker's protocol says so in its log."""
        while True:
            try:
                await self.transport.publish_heartbeat(self.descriptor())
            except Exception as exc:  # an announcement lost costs a log line, not a step
                log.warning("worker %s could not announce itself (%s)", self.name, exc)
            await asyncio.sleep(self.heartbeat_interval * ANNOUNCE_EVERY)

    async def stop(self) -> None:
        """Take nothing more; return once the steps in flight have finished and reported."""
        self._stopping.set()
        if self._running:
            await self._stopped.wait()

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    async def _take_and_start(self, replays: ThreadPoolExecutor) -> None:
        free = self.concurrency - len(self._in_flight)
        if free <= 0:
            await asyncio.wait(self._in_flight, return_when=asyncio.FIRST_COMPLETED)
            return
        started = time.monotonic()
        try:
            # Not cut short by stop(): a take interrupted after claiming would lose its tasks.
            taken = await self.transport.take_tasks(self.group, free, self.poll_timeout)
        except Exception as exc:
            # A transport outage must not kill the worker: tasks wait in the queue meanwhile.
            log.warning("worker %s: taking tasks failed (%s); retrying", self.name, exc)
            await asyncio.sleep(TAKE_RETRY_DELAY)
            return
        if not taken and time.monotonic() - started < self.poll_timeout / 2:
            # A closed transport answers at once; do not spin on it until stop().
            await asyncio.sleep(self.poll_timeout)
        for raw in taken:
            if isinstance(raw, dict) and raw.get("kind") == WORKFLOW_KIND:
                self._start(self._turn(raw, replays))
                continue
            try:
                task = check("task", raw)
            except Malformed as exc:
                log.warning("worker %s: dropping a malformed task: %s", self.name, exc)
                continue
            if self._fenced_out(("step", str(task["run_id"]), str(task["seq"])), task):
                continue
            self._start(self._execute(task))

    def _fenced_out(self, key: tuple[str, ...], task: Message) -> bool:
        """Whether the task's fence is not above the highest seen for ``key``: the task was
        sent again since (or this is a copy of one taken already), and it is dropped."""
        fence = fence_of(task)
        if self.fences.admits(key, fence):
            return False
        seen = self.fences.seen(key)
        what = "a copy of a task taken already" if fence == seen else "sent again since"
        log.warning(
            "worker %s: dropping %s task of %s under fence %s (%s: fence %s seen)",
            self.name,
            key[0],
            ":".join(key[1:]),
            fence,
            what,
            seen,
        )
        return True

    def _start(self, work: Coroutine[Any, Any, None]) -> None:
        running = asyncio.create_task(work)
        self._in_flight.add(running)
        running.add_done_callback(self._in_flight.discard)

    async def _turn(self, raw: Message, replays: ThreadPoolExecutor) -> None:
        """Decide one remote workflow turn and send the decision; beat while replaying."""
        try:
            task = check_workflow_task(raw)
        except Malformed as exc:
            log.warning("worker %s: dropping a malformed workflow task: %s", self.name, exc)
            return
        if expired(task, datetime.now(UTC)):
            log.info("worker %s: skipping turn %s, sent again since", self.name, task["task_id"])
            return
        if self._fenced_out(("turn", str(task["run_id"])), task):
            return
        beat = {
            "protocol": PROTOCOL,
            "kind": WORKFLOW_KIND,
            "task_id": task["task_id"],
            "run_id": task["run_id"],
            "worker": self.name,
        }
        done = asyncio.Event()
        pulse = Pulse(silence_window(task))
        beating = asyncio.create_task(self._beats(beat, done, pulse))
        try:
            loop = asyncio.get_running_loop()
            main = functools.partial(
                replay,
                self.wire.open_task(task),
                self.workflows,
                self.steps,
                step_loop=loop,
                pulse=pulse,
            )
            decision = await run_on_own_loop(main, replays)
        except Exception as exc:
            log.exception("worker %s: replaying %s failed", self.name, task.get("run_id"))
            decision = failed_decision(task, exc)
        finally:
            done.set()
            beating.cancel()
        sealed = self.wire.seal_result(decision_doc(decision, self.name))
        await self._send(sealed, reply_to(task))

    async def _execute(self, task: Message) -> None:
        done = asyncio.Event()
        beating = asyncio.create_task(self._beat(task, done))
        try:
            result = await self._outcome(task)
        finally:
            # An event, not only a cancel: a cancellation landing inside a transport call can
            # come out as that library's own error, and the beat loop must stop all the same.
            done.set()
            beating.cancel()
        await self._send(result)

    async def _outcome(self, task: Message) -> Message:
        name = str(task.get("name"))
        try:
            with self.tracing.remote_step(task):
                definition = self.steps.get(name)
                if definition is None or definition.fn is None:
                    raise UnknownStepError(name)
                input = self.wire.open_task(task).get("input")
                output = await within(_step_context(task), call_step_body(definition.fn, input))
                output = normalise(output, f"output of step {name!r}")
        except Exception as exc:
            return self._result(task, ok=False, error=error_dict(exc))
        return self._result(task, ok=True, output=output)

    def _result(self, task: Message, *, ok: bool, output: Any = None, error: Any = None) -> Message:
        result = {
            **_identity(task),
            "protocol": PROTOCOL,
            "ok": ok,
            "output": output,
            "error": error,
            "worker": self.name,
        }
        return self.wire.seal_result(result)

    async def _beat(self, task: Message, done: asyncio.Event) -> None:
        beat = {**_identity(task), "protocol": PROTOCOL, "worker": self.name}
        await self._beats(beat, done)

    async def _beats(self, beat: Message, done: asyncio.Event, pulse: Pulse | None = None) -> None:
        while not done.is_set():
            try:
                await self.transport.publish_heartbeat({**beat, "at": _now()})
                if pulse is not None:
                    pulse.beat_sent()
            except Exception as exc:
                if done.is_set():
                    return
                # A lost beat only narrows the dispatcher's margin; the step goes on.
                log.warning("worker %s: heartbeat for %s failed: %s", self.name, beat, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), self.heartbeat_interval)

    async def _send(self, result: Message, queue: str | None = None) -> None:
        """Send a step's result (or, to ``queue``, a turn's decision), retrying a failure."""
        for delay in (*SEND_RETRY_DELAYS, None):
            try:
                if queue is None:
                    await self.transport.send_result(result)
                else:
                    await self.transport.send_decision(queue, result)
                return
            except Exception as exc:
                if delay is None:
                    log.error("worker %s: giving up on result %s: %s", self.name, result, exc)
                    return
                log.warning("worker %s: sending a result failed (%s); retrying", self.name, exc)
                await asyncio.sleep(delay)


def _definition(step: Any) -> StepDefinition:
    return step if isinstance(step, StepDefinition) else step_definition(step)


def _identity(task: Message) -> Message:
    """What a step task's result and beats repeat of it: the step, its attempt and its fence."""
    fence = fence_of(task)
    return {
        "step_id": task.get("step_id"),
        "run_id": task.get("run_id"),
        "seq": task.get("seq"),
        "attempt": task.get("attempt"),
        **({} if fence is None else {"fence": fence}),
    }


def _step_context(task: Message) -> StepContext:
    """A step task's :func:`runlane.step_context` (fence 0: an engine that sends none)."""
    return StepContext(
        str(task["run_id"]),
        int(task["seq"]),
        str(task["name"]),
        int(task["attempt"]),
        fence_of(task) or 0,
    )


ANNOUNCE_EVERY = 10
"""A worker announces itself again every this many heartbeat intervals."""


def _now() -> str:
    return datetime.now(UTC).isoformat()


__all__ = ["Worker"]
