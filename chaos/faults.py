"""The fault injector: every few seconds, at random (seeded), one fault of a kind drawn from a
shuffled deck of all of them, so that even a short run injects every kind.

Transport messages are delayed or dropped by the proxy every member reaches Redis through
(:mod:`chaos.proxy`). With a standby (``CHAOS_STANDBY``), the deck holds one kind more,
"failover": the primary stopped as in a crash, the standby promoted, a new standby made.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.servers import PrivatePostgres, PrivateRedis, ReplicatedPostgres

from .config import LEASE
from .failover import StoreState, read_state
from .fleet import Fleet
from .proxy import Proxy

KINDS = (
    "kill-engine",
    "kill-worker",
    "freeze-engine",
    "freeze-worker",
    "terminate-backends",
    "restart-redis",
    "restart-postgres",
    "delay-transport",
    "drop-transport",
    "deploy",
)
FAILOVER = "failover"
"""The fault of a topology with a standby."""


def kinds_for(standby: bool) -> tuple[str, ...]:
    """The fault kinds of a run: every kind, and a failover when there is a standby."""
    return (*KINDS, FAILOVER) if standby else KINDS


GAP = (2.0, 5.0)
"""Seconds between two faults, drawn uniformly."""

FREEZE = LEASE + 2.0
"""A frozen engine stays stopped past its lease: its runs are recovered while it is alive. A
frozen worker stays stopped past the remote turn's silence window (the lease, by default): its
turns are sent again, and other workers decide them, while it is alive."""

DOWN = 1.0
"""Seconds a restarted server stays down."""

DELAY = 4.0
"""Seconds the proxy holds every transport message: longer than a remote step's timeout (3 s)."""

DROP = 2.0
"""Seconds of transport messages the proxy throws away, with every connection."""


@dataclass
class Injector:
    rng: random.Random
    fleet: Fleet
    pg: PrivatePostgres | ReplicatedPostgres
    redis: PrivateRedis
    proxy: Proxy
    database: str
    log: Path
    kinds: tuple[str, ...] = KINDS
    lag: float = 0.0  # seconds a failover's standby stops receiving before the crash
    counts: Counter[str] = field(default_factory=Counter)
    freezes: list[tuple[int, float, float]] = field(default_factory=list)  # pid, stop, cont
    terminated: int = 0  # backends terminated
    crashes: list[StoreState] = field(default_factory=list)  # each old primary's, at its crash
    switches: list[tuple[float, float]] = field(default_factory=list)  # promoted, rebuilt (s)
    _deck: list[str] = field(default_factory=list)
    _began: float = 0.0

    def run(self, seconds: float) -> None:
        self._began = time.monotonic()
        deadline = self._began + seconds
        while True:
            gap = self.rng.uniform(*GAP)
            if time.monotonic() + gap >= deadline:
                break
            time.sleep(gap)
            self.fleet.revive_the_dead()
            self.inject(self._draw())

    def _draw(self) -> str:
        if not self._deck:
            self._deck = list(self.kinds)
            self.rng.shuffle(self._deck)
        return self._deck.pop()

    def inject(self, kind: str) -> None:
        started = time.time()
        detail = self._do(kind)
        self.counts[kind] += 1
        with open(self.log, "a") as log:
            log.write(json.dumps({"kind": kind, "t": started, **detail}) + "\n")
        shown = " ".join(f"{k}={v}" for k, v in detail.items() if k != "until")
        print(f"chaos: {time.monotonic() - self._began:5.1f}s {kind} {shown}", flush=True)

    def _do(self, kind: str) -> dict[str, Any]:
        if kind in ("kill-engine", "kill-worker"):
            name = self.rng.choice(self.fleet.names(kind.split("-")[1]))
            old, new = self.fleet.kill(name)
            return {"member": name, "pid": old, "new_pid": new}
        if kind in ("freeze-engine", "freeze-worker"):
            name = self.rng.choice(self.fleet.names(kind.split("-")[1]))
            pid, stopped, resumed = self.fleet.freeze(name, FREEZE)
            self.freezes.append((pid, stopped, resumed))
            return {"member": name, "pid": pid, "until": resumed}
        if kind == "terminate-backends":
            killed = self.pg.terminate_backends(self.database)
            self.terminated += killed
            return {"backends": killed}
        if kind == "restart-redis":
            self.redis.restart(down_for=DOWN)
            return {}
        if kind == "restart-postgres":
            self.pg.stop("immediate")
            time.sleep(DOWN)
            self.pg.start()
            return {}
        if kind == "deploy":
            # Forward only, one member at a time, as a rolling deploy goes: a member still on
            # release 1 moves to 2; once all have, a member is deployed again on 2.
            behind = sorted(n for n, r in self.fleet.releases.items() if r == "1")
            name = self.rng.choice(behind or sorted(self.fleet.members))
            old, new = self.fleet.deploy(name, "2")
            return {"member": name, "pid": old, "new_pid": new, "release": "2"}
        if kind in ("delay-transport", "drop-transport"):
            drop = kind == "drop-transport"
            self.proxy.hold(DROP if drop else DELAY, drop=drop)
            return {}
        if kind == FAILOVER:
            return self._failover()
        raise ValueError(kind)

    def _failover(self) -> dict[str, Any]:
        """Stop the primary as in a crash, promote the standby, make a new standby from it (a
        synchronous primary's commits wait for it meanwhile); with a ``lag``, the standby stops
        receiving that long before the crash, so the primary's last commits are lost."""
        if not isinstance(self.pg, ReplicatedPostgres):
            raise ValueError("a failover needs a standby (CHAOS_STANDBY)")
        if self.lag:
            self.pg.standby.detach()
            time.sleep(self.lag)
        crashed_at, began = time.time(), time.monotonic()
        old = self.pg.failover()
        promoted = time.monotonic() - began
        self.pg.rebuild_standby()
        rebuilt = time.monotonic() - began
        self.switches.append((promoted, rebuilt))
        self.crashes.append(self._read_crashed(old, crashed_at))
        return {"promoted": f"{promoted:.1f}s", "rebuilt": f"{rebuilt:.1f}s"}

    def _read_crashed(self, server: PrivatePostgres, crashed_at: float) -> StoreState:
        """The old primary's data as the crash left it (started on a port of its own, then
        thrown away): what the checker holds the store to."""
        with server.aside() as admin:
            state = read_state(admin.rsplit("/", 1)[0] + f"/{self.database}", crashed_at)
        server.destroy()
        return state
