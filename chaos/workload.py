"""The producer: a web process's engine (``drive=False, consumers="never"``) starting a mixed
workload for the run's budget, signalling the runs that wait, cancelling some, pausing and
resuming some, forking some and sending updates to the runs that answer them.

Its record (``producer.jsonl``, one JSON object a line) is what the checker holds the store to:
every start it made and how it ended (acknowledged, or refused by a quota or a full singleton
key: expected outcomes), every cancel it asked for, every signal it sent, when each run it
paused was seen paused and when its resume was asked, every fork it made and every reply it got,
and a run it found gone (only a failover with asynchronous replication loses one).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from runlane import (
    ConcurrencyLimitError,
    Engine,
    RateLimitError,
    RunNotFoundError,
    RunStatus,
    SingletonQueueFullError,
    StoreUnavailableError,
    UpdateRejectedError,
)

from .config import Config

T = TypeVar("T")

MIX = {
    "c.plain": 3.0,
    "c.sleepy": 2.0,
    "c.signal": 2.0,
    "c.remote": 3.0,
    "c.rwf": 2.0,
    "c.fan": 1.0,
    "c.chain": 1.0,
    "c.queue": 1.5,
    "c.reject": 1.5,
    "c.replace": 1.5,
    "c.quota": 2.5,
    "c.doomed": 0.3,
    "c.stepq": 1.5,
    "c.metered": 1.0,
    "c.limited": 1.5,
    "c.throttled": 1.0,
    "c.debounced": 1.5,
    "c.desk": 1.0,
}
"""Workflows started, by weight."""

KEYS = 2
"""Keys per gated workflow (singleton modes, quota)."""

FAN_WIDTH = 3
CHAIN_LENGTH = 3  # runs: the first and its continuations
PATIENCE = 90.0
"""Seconds a call is retried while the store is unreachable before the producer gives up."""

# The share of runs of a workflow that the producer cancels, and when (seconds after the start).
CANCELS = {"c.signal": 0.2, "c.sleepy": 0.15, "c.plain": 0.05, "c.fan": 0.1, "c.rwf": 0.1}
CANCEL_AFTER = (0.0, 2.0)
SIGNAL_AFTER = (0.2, 3.0)
SIGNALLED = ("c.signal", "c.rwf")
"""Workflows that wait for the signal ``go``: the producer sends each run one (unless it
cancels the run), its payload ``{"n": <the run's number>}``."""
START_GAP = (0.02, 0.12)

# The share of runs of a workflow that the producer pauses, when (seconds after the start) and
# for how long. Remote workflows are left out: a worker's turn cannot hear of a pause, so it
# pauses at that turn's end, its local steps run meanwhile.
PAUSES = {
    "c.plain": 0.15,
    "c.sleepy": 0.2,
    "c.signal": 0.15,
    "c.remote": 0.15,
    "c.queue": 0.1,
    "c.stepq": 0.15,
    "c.metered": 0.1,
}
PAUSE_AFTER = (0.0, 1.0)
PAUSED_FOR = (0.3, 2.0)
FORKED = {"c.plain": 0.2}
"""The share of ``c.plain`` runs the producer forks, from their second operation (their first,
once recorded, is reused), a while after the start."""
FORK_AFTER = (0.2, 3.0)
UPDATE_AFTER = (0.0, 2.0)
UPDATE_TIMEOUT = 120.0


class Record:
    """The producer's record, appended a line at a time."""

    def __init__(self, config: Config) -> None:
        self._file = open(config.root / "producer.jsonl", "a", buffering=1)  # noqa: SIM115

    def write(self, event: str, **fields: Any) -> None:
        self._file.write(json.dumps({"event": event, "t": time.time(), **fields}) + "\n")

    def close(self) -> None:
        self._file.close()


async def through_outage(call: Callable[[], Awaitable[T]], patience: float = PATIENCE) -> T:
    """``call()``, retried while it raises ``StoreUnavailableError``, for ``patience`` seconds."""
    deadline = time.monotonic() + patience
    pause = 0.1
    while True:
        try:
            return await call()
        except StoreUnavailableError:
            if time.monotonic() + pause > deadline:
                raise
            await asyncio.sleep(pause)
            pause = min(1.0, pause * 2)


def _input(workflow: str, n: int, rng: random.Random) -> dict[str, Any]:
    if workflow in ("c.queue", "c.reject", "c.replace", "c.quota"):
        return {"key": str(rng.randrange(KEYS))}
    if workflow in ("c.limited", "c.throttled", "c.debounced"):
        return {"key": str(rng.randrange(KEYS)), "n": n}
    if workflow == "c.metered":
        return {"tenant": rng.choice("xyz"), "priority": rng.choice([0, 0, 5])}
    if workflow in ("c.sleepy", "c.rwf"):
        return {"sleep": round(rng.uniform(0.3, 2.0), 2)}
    if workflow == "c.fan":
        return {"width": FAN_WIDTH}
    if workflow == "c.chain":
        return {"left": CHAIN_LENGTH - 1}
    return {"n": n}


class Producer:
    def __init__(self, config: Config, engine: Engine) -> None:
        self.engine = engine
        self.rng = random.Random(config.seed)
        self.record = Record(config)
        self.seconds = config.seconds
        self.followups: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        deadline = time.monotonic() + self.seconds
        n = 0
        while time.monotonic() < deadline:
            n += 1
            workflow = self.rng.choices(list(MIX), weights=list(MIX.values()))[0]
            run_id = f"{workflow[2:]}-{n:05d}"
            if await self.start(workflow, run_id, _input(workflow, n, self.rng)):
                self.follow_up(workflow, run_id, n)
            await asyncio.sleep(self.rng.uniform(*START_GAP))
        await asyncio.gather(*self.followups)
        self.record.write("done", starts=n)

    async def start(self, workflow: str, run_id: str, input: dict[str, Any]) -> bool:
        fields = {"run": run_id, "workflow": workflow, "input": input, "asked": time.time()}
        try:
            run = await through_outage(lambda: self.engine.start(workflow, input, run_id=run_id))
        except (ConcurrencyLimitError, SingletonQueueFullError, RateLimitError) as exc:
            self.record.write("refused", **fields, error=type(exc).__name__)
            return False
        except StoreUnavailableError as exc:
            self.record.write("gave-up", **fields, action="start", error=str(exc))
            return False
        if run.id != run_id:  # a debounced start, folded into the key's run that had not begun
            self.record.write("folded", **{**fields, "run": run.id, "requested": run_id})
            return False
        self.record.write("started", **fields, created_at=run.created_at.isoformat())
        return True

    def follow_up(self, workflow: str, run_id: str, n: int) -> None:
        actions: list[Awaitable[None]] = []
        if self.rng.random() < CANCELS.get(workflow, 0.0):
            actions.append(self.cancel(run_id, self.rng.uniform(*CANCEL_AFTER)))
        elif workflow in SIGNALLED:
            actions.append(self.signal(run_id, {"n": n}, self.rng.uniform(*SIGNAL_AFTER)))
        if self.rng.random() < PAUSES.get(workflow, 0.0):
            after, held = self.rng.uniform(*PAUSE_AFTER), self.rng.uniform(*PAUSED_FOR)
            actions.append(self.pause(run_id, after, held))
        if self.rng.random() < FORKED.get(workflow, 0.0):
            actions.append(self.fork(run_id, self.rng.uniform(*FORK_AFTER)))
        if workflow == "c.desk":
            actions.append(self.update(run_id, {"n": n}, self.rng.uniform(*UPDATE_AFTER)))
        for action in actions:
            task = asyncio.ensure_future(self.on_run(run_id, action))
            self.followups.add(task)
            task.add_done_callback(self.followups.discard)

    async def on_run(self, run_id: str, action: Awaitable[None]) -> None:
        """A follow-up of a run. The run may be gone: a failover lost its start (asynchronous
        replication), which the record notes and the checker counts as a run lost."""
        try:
            await action
        except RunNotFoundError:
            self.record.write("missing", run=run_id)

    async def cancel(self, run_id: str, after: float) -> None:
        await asyncio.sleep(after)
        # Asked before it is sent: a cancel whose answer an outage cut may still have landed.
        self.record.write("cancel", run=run_id)
        try:
            cancelled = await through_outage(lambda: self.engine.cancel(run_id))
        except StoreUnavailableError as exc:
            self.record.write("gave-up", run=run_id, action="cancel", error=str(exc))
            return
        self.record.write("cancelled", run=run_id, result=cancelled)

    async def pause(self, run_id: str, after: float, held: float) -> None:
        """Pause the run, note when it is seen paused (a turn in flight ends first), and
        resume it ``held`` seconds after the pause."""
        await asyncio.sleep(after)
        self.record.write("pause", run=run_id)
        try:
            paused = await through_outage(lambda: self.engine.pause(run_id))
            self.record.write("paused", run=run_id, result=paused)
            if not paused:
                return
            until = time.monotonic() + held
            while time.monotonic() < until:
                run = await through_outage(lambda: self.engine.get_run(run_id))
                if run is not None and run.status == RunStatus.PAUSED:
                    self.record.write("seen-paused", run=run_id)
                    break
                if run is None or run.is_terminal or run.status == RunStatus.CANCELLING:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(max(0.0, until - time.monotonic()))
            # Asked before it is sent: from here on, the run may run again.
            self.record.write("resume", run=run_id)
            resumed = await through_outage(lambda: self.engine.resume(run_id))
        except StoreUnavailableError as exc:
            self.record.write("gave-up", run=run_id, action="pause", error=str(exc))
            return
        self.record.write("resumed", run=run_id, result=resumed)

    async def fork(self, run_id: str, after: float) -> None:
        await asyncio.sleep(after)
        try:
            fork = await through_outage(lambda: self.engine.fork(run_id, from_seq=2))
        except StoreUnavailableError as exc:
            self.record.write("gave-up", run=run_id, action="fork", error=str(exc))
            return
        self.record.write("forked", run=fork.id, source=run_id, workflow="c.plain")

    async def update(self, run_id: str, payload: dict[str, Any], after: float) -> None:
        await asyncio.sleep(after)
        ask = lambda: self.engine.update(run_id, "ask", payload, timeout=UPDATE_TIMEOUT)  # noqa: E731
        try:
            reply = await through_outage(ask)
        except (StoreUnavailableError, TimeoutError, UpdateRejectedError) as exc:
            self.record.write("gave-up", run=run_id, action="update", error=repr(exc))
            return
        self.record.write("answered", run=run_id, payload=payload, reply=reply)

    async def signal(self, run_id: str, payload: dict[str, Any], after: float) -> None:
        await asyncio.sleep(after)
        try:
            await through_outage(lambda: self.engine.signal(run_id, "go", payload))
        except StoreUnavailableError as exc:
            self.record.write("gave-up", run=run_id, action="signal", error=str(exc))
            return
        self.record.write("signalled", run=run_id, payload=payload)


async def produce(config: Config, engine: Engine) -> None:
    producer = Producer(config, engine)
    async with engine:
        print("READY", flush=True)
        try:
            await producer.run()
        finally:
            producer.record.close()
