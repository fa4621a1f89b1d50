"""The engine is the public facade only: its public names are pinned, so wiring (how runs are
executed, woken, leased) cannot leak back onto it; that lives in ``runlane.execution``."""

from __future__ import annotations

from runlane import Engine
from runlane.stores import MemoryStore

# The public methods (start, fork, signal, update, cancel, pause, resume, requeue, reads, waits, the loop phases,
# lifecycle), what the operations views call (read, prune, start_consumers), and the
# attributes the README and the command line name.
FACADE = {
    "cancel",
    "drain",
    "fire_schedules",
    "fork",
    "get_run",
    "list_engines",
    "list_runs",
    "list_steps",
    "now",
    "pause",
    "prune",
    "prune_events",
    "prune_retained",
    "publish_event",
    "read",
    "recover_incomplete",
    "requeue",
    "resume",
    "resume_due_timers",
    "run_pending",
    "signal",
    "signal_with_start",
    "start",
    "start_many",
    "start_consumers",
    "sweep_timeouts",
    "tick",
    "update",
    "wait_for_run",
    # attributes
    "clock",
    "codec",
    "consumers",
    "drive",
    "id",
    "namespace",
    "options",
    "pruner",
    "registry",
    "schedules",
    "scope_reads",
    "stats",
    "store",
    "transport",
}


def _public(obj: object) -> set[str]:
    return {name for name in dir(obj) if not name.startswith("_")}


def test_the_engine_shows_exactly_its_facade() -> None:
    engine = Engine(MemoryStore())
    assert _public(engine) == FACADE


def test_the_engine_class_adds_nothing_public_beyond_its_facade() -> None:
    assert _public(Engine) <= FACADE
