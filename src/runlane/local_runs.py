"""The runs this instance is executing: at most one task per run, bounded, with follow-ups.

Each run executes on at most one local task. A wake that arrives while its turn is in flight
asks for one more turn after it; runs a turn woke (a freed singleton slot's waiter, a parent,
new children) follow on at once. The bound is ``max_local_runs`` turns at a time. Once the
instance stops accepting work (a drain), a task still waiting for a turn's slot drops its run,
which stays due in the store for another instance or the next poll; only turns already running
finish (and runs already leased to this instance, whose lease is held here).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from .models import Claim

log = logging.getLogger(__name__)

Execute = Callable[[str, bool, Claim | None, bool], Awaitable[list[str]]]
"""Claim a run (or use the claim given) and drive one turn; returns the woken runs.
``handoff`` marks the wake of a handed-off timer; ``polled``, a run a poll found (not a wake)."""


class LocalRuns:
    def __init__(
        self,
        execute: Execute,
        route: Callable[[list[str]], bool],
        accepting: Callable[[], bool],
        limit: int,
    ) -> None:
        self._execute = execute
        self._route = route  # sends woken runs elsewhere (the run queue); False = run them here
        self._accepting = accepting
        self.limit = limit
        self.inflight: dict[str, asyncio.Task[None]] = {}
        self.running: set[str] = set()  # the runs of ``inflight`` whose turn has its slot
        self._again: set[str] = set()
        # Runs whose wake mid-turn was a handed-off timer: the next turn claims as a hand-off.
        self._handoffs: set[str] = set()
        self._claims: dict[str, Claim] = {}
        self._slots = asyncio.Semaphore(limit)
        self._room = asyncio.Event()

    def room(self) -> int:
        return self.limit - len(self.inflight)

    async def room_freed(self) -> None:
        self._room.clear()
        await self._room.wait()

    def spawn(
        self, run_id: str, *, handoff: bool = False, poll: bool = False, claim: Claim | None = None
    ) -> asyncio.Task[None]:
        task = self.inflight.get(run_id)
        if task is not None:
            # A wake that arrived mid-turn needs one more turn; a poll only saw the turn running.
            if not poll:
                self._again.add(run_id)
            if handoff:
                # Its claim must say so: the hand-off pushed the run's wake time a lease ahead,
                # and a plain claim would find it not due (the wake lost until that time).
                self._handoffs.add(run_id)
            if claim is not None:  # leased to us already: the next turn of that task uses it
                self._claims[run_id] = claim
            return task
        task = asyncio.create_task(
            self._drive(run_id, handoff, claim, poll), name=f"runlane-run-{run_id}"
        )
        self.inflight[run_id] = task
        return task

    def spawn_all(self, run_ids: Iterable[str]) -> list[asyncio.Task[None]]:
        return [self.spawn(run_id) for run_id in run_ids]

    def _spawn_new(self, run_ids: Iterable[str]) -> list[asyncio.Task[None]]:
        """``spawn_all``, returning only the tasks it created. A run already in flight gets its
        next turn from its own task, which is not this one's to wait for: two runs waking each
        other mid-turn would each wait for the other's task, and neither would end."""
        created = []
        for run_id in run_ids:
            running = self.inflight.get(run_id)
            task = self.spawn(run_id)
            if task is not running:
                created.append(task)
        return created

    async def wait(self, timeout: float) -> None:
        """Wait for the turns in flight; cancel those still running after ``timeout``."""
        tasks = list(self.inflight.values())
        if not tasks:
            return
        _, late = await asyncio.wait(tasks, timeout=timeout)
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)

    async def _drive(self, run_id: str, handoff: bool, claim: Claim | None, polled: bool) -> None:
        followups: list[asyncio.Task[None]] = []
        try:
            again = True
            while again:
                async with self._slots:
                    if claim is None and not self._accepting():
                        break  # draining: the run is not ours yet, and stays due in the store
                    # A wake or hand-off that came before this turn claims (during the last
                    # turn, or before the task had a slot) is this turn's; a hand-off pushed the
                    # run's wake time ahead, so the claim must say so.
                    self._again.discard(run_id)
                    handoff = handoff or run_id in self._handoffs
                    self._handoffs.discard(run_id)
                    self.running.add(run_id)
                    try:
                        woken = await self._execute(run_id, handoff, claim, polled)
                    finally:
                        self.running.discard(run_id)
                handoff, claim, polled = False, self._claims.pop(run_id, None), False
                # While draining, woken runs stay due in the store for another instance (or
                # the next start) to pick up; taking them here would keep the drain busy.
                accepting = self._accepting()
                again = claim is not None or (
                    accepting and (run_id in woken or run_id in self._again)
                )
                others = [w for w in woken if w != run_id]
                if accepting and others and not self._route(others):
                    followups.extend(self._spawn_new(others))
        except Exception:
            log.exception(
                "executing run %s failed; its lease will expire and it will be recovered", run_id
            )
        finally:
            self.inflight.pop(run_id, None)
            self._handoffs.discard(run_id)
            self._room.set()
        if followups:
            await asyncio.gather(*followups, return_exceptions=True)
