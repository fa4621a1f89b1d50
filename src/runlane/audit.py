"""The audit log: every operator action taken through the HTTP API or the command line.

An entry (``models.AuditEntry``) is appended to the engine's store after the action: who took
it (a token's name, or the OS user who ran the command), through what (``http``, ``cli``),
which action on which run, and how it went (``ok``, or the refusal: an HTTP status and error
type, an error's class name). It is written after the action, so an entry that cannot be
written (the store is unreachable) is logged and lost, never a reason to undo the action.
Workflow code and the Python API are not audited: they are the application, not an operator.
"""

from __future__ import annotations

import getpass
import logging

from .engine import Engine
from .models import AuditEntry

log = logging.getLogger(__name__)

OK = "ok"


def os_user() -> str:
    """The name the command line's entries carry: the OS user running it."""
    try:
        return getpass.getuser()
    except Exception:  # no user name to be found (a container without one): still audited
        return "unknown"


async def record(
    engine: Engine,
    *,
    actor: str,
    source: str,
    action: str,
    outcome: str,
    run_id: str | None = None,
    detail: str | None = None,
) -> AuditEntry | None:
    """Append an entry, stamped with the engine's clock and namespace, to the audit log; None,
    logged, when the store could not take it."""
    entry = AuditEntry(
        engine.now(), actor, source, action, outcome, run_id, engine.namespace, detail
    )
    try:
        return await engine.store.append_audit(entry)
    except Exception as exc:
        log.warning("audit entry not written (%s): %s", exc, entry)
        return None


def outcome_of(error: BaseException | None) -> str:
    """How an action went, as the log says it: ``ok``, or the class name of what refused it."""
    return OK if error is None else type(error).__name__


__all__ = ["OK", "os_user", "outcome_of", "record"]
