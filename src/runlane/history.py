"""A run's history as a document, and a replay of it against a workflow's code.

``runlane runs export`` writes a run's history as JSON (:func:`history_doc`; the JSON Schema is
``docs/protocol/history.schema.json``): the run, its step records as the wire protocol writes
them (``seq``, ``kind``, ``name``, ``status``, values and times), and the signals delivered and
not consumed yet. :func:`check_replay` replays a workflow's body against such a history and
says where the code diverges from it, writing nothing and running no step: ``runlane replay``
checks the stored runs of an app before a deploy, ``runlane.testing.replay`` one history in a
test.

The replay is the worker's (:class:`~runlane.remote.replay.DecisionTurn`, the engine's own turn with its
doors swapped), with one door more: the history's end. An operation past the last recorded
position, a step that would run (a retry that came due), a side effect that would be called or
a read of the store ends the replay there, as a suspension would: what follows is what the new
code would do next, which no history can contradict.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from .definitions import StepDefinition, WorkflowDefinition
from .errors import NonDeterminismError, Suspend, UnknownWorkflowError
from .models import JSON, Claim, Run, RunCursor, RunQuery, RunStatus, Signal, StepRecord
from .registry import Registry
from .remote.replay import DecisionTurn, WorkerHost
from .remote.tasks import record_doc, record_from_doc, signal_from_doc
from .stores.base import Reads, Store
from .transports.messages import Malformed

FORMAT = "runlane.history"
"""The ``format`` of a history document."""

FORMAT_VERSION = 1


@dataclass(frozen=True)
class History:
    """A run as its history document holds it."""

    run: Run
    steps: list[StepRecord]
    signals: list[Signal]


def history_doc(run: Run, steps: list[StepRecord], signals: list[Signal]) -> dict[str, Any]:
    """The JSON document of a run's history (``runlane runs export``)."""
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "run": {
            "id": run.id,
            "workflow": run.workflow,
            "version": run.version,
            "status": str(run.status),
            "input": run.input,
            "output": run.output,
            "error": run.error,
            "created_at": run.created_at.isoformat(),
            "updated_at": run.updated_at.isoformat(),
            "namespace": run.namespace,
            "parent_id": run.parent_id,
            "attempt": run.recoveries + 1,
            "attributes": run.attributes,
        },
        "history": [record_doc(r) for r in sorted(steps, key=lambda r: r.seq)],
        "signals": [{"id": s.id, "name": s.name, "payload": s.payload} for s in signals],
    }


def load_history(source: Mapping[str, Any] | str | os.PathLike[str]) -> History:
    """A history document (as exported), its JSON text, or the path of a file holding it;
    ``ValueError`` naming what is wrong with one that is not a history."""
    doc = _document(source)
    if doc.get("format") != FORMAT or doc.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"not a runlane history (format {FORMAT!r}, version {FORMAT_VERSION}): "
            f"format {doc.get('format')!r}, version {doc.get('format_version')!r}"
        )
    run = _run(doc.get("run"))
    try:
        steps = [record_from_doc(run.id, r) for r in _list(doc, "history")]
        signals = [signal_from_doc(run.id, s) for s in _list(doc, "signals")]
    except Malformed as exc:
        raise ValueError(f"history of run {run.id!r}: {exc}") from exc
    return History(run, steps, signals)


def _document(source: Mapping[str, Any] | str | os.PathLike[str]) -> Mapping[str, Any]:
    if isinstance(source, Mapping):
        return source
    text = str(source)
    if not text.lstrip().startswith("{"):
        text = Path(source).read_text(encoding="utf-8")
    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise ValueError("a history document is a JSON object")
    return doc


def _list(doc: Mapping[str, Any], name: str) -> list[Any]:
    value = doc.get(name) or []
    if not isinstance(value, list):
        raise ValueError(f"a history's {name!r} is a list")
    return value


def _run(doc: Any) -> Run:
    if not isinstance(doc, dict):
        raise ValueError("a history's 'run' is an object")
    for name in ("id", "workflow", "version"):
        if not isinstance(doc.get(name), str) or not doc[name]:
            raise ValueError(f"a history's run needs its {name!r}")
    status = doc.get("status", RunStatus.RUNNING)
    if status not in set(RunStatus):
        raise ValueError(f"a history's run has status {status!r}")
    created = datetime.fromisoformat(str(doc["created_at"])) if doc.get("created_at") else None
    at = created or datetime.fromisoformat("2000-01-01T00:00:00+00:00")
    attempt = doc.get("attempt", 1)
    return Run(
        id=doc["id"],
        workflow=doc["workflow"],
        version=doc["version"],
        status=RunStatus(status),
        input=doc.get("input"),
        output=doc.get("output"),
        error=doc.get("error"),
        tags=(),
        created_at=at,
        updated_at=at,
        wake_at=None,
        parent_id=doc.get("parent_id"),
        namespace=doc.get("namespace"),
        priority=0,
        recoveries=max(0, int(attempt) - 1) if isinstance(attempt, int) else 0,
    )


# ---------------------------------------------------------------- replaying


class _HistoryEnds:
    """The store of a replay check: any read of it is past what the history can tell."""

    def __getattr__(self, name: str) -> Any:
        raise Suspend()


class _CheckHost(WorkerHost):
    """A worker's host that runs nothing: a step that would run ends the replay."""

    def __init__(self) -> None:
        super().__init__({})
        self.store = cast(Store, _HistoryEnds())

    async def call_step(self, definition: StepDefinition, input: JSON) -> JSON:
        raise Suspend()


class _CheckTurn(DecisionTurn):
    """A replay that stops where the history ends (see the module's docstring). A patch
    marker the code lacks is a divergence here: the code checked is the code to deploy."""

    waits_for_newer_code = False

    def next_seq(self) -> int:
        seq = super().next_seq()
        if seq > self.last_recorded:
            raise Suspend()
        return seq

    async def side_effect(self, fn: Callable[[], Any]) -> Any:
        raise Suspend()


async def check_replay(definition: WorkflowDefinition, history: History) -> None:
    """Replay ``definition``'s body against ``history``; ``NonDeterminismError`` (with the
    position, the recorded and the new operation) where the code cannot follow it: another
    operation at a recorded position, or the body ending before the history does."""
    claim = Claim(history.run, history.steps, history.signals)
    turn = _CheckTurn(_CheckHost(), claim, definition, {"task_id": "replay", "children": {}})
    await turn.execute()
    if turn.diverged is not None:
        raise turn.diverged
    ended = turn.decision.outcome.get("type") in ("complete", "fail", "continue_as_new")
    left = [r for r in history.steps if r.seq > turn.position]
    if ended and left:
        first = min(left, key=lambda r: r.seq)
        raise NonDeterminismError(
            run_id=history.run.id,
            seq=first.seq,
            recorded=f"{first.kind} {first.name!r}",
            new="nothing: the workflow ended",
        )


@dataclass
class ReplayReport:
    """What ``runlane replay`` found: the runs checked, those the code cannot replay, and those
    it could not check (no code for their version in the app, or a remote workflow declared
    without its code)."""

    checked: int = 0
    diverged: list[tuple[Run, NonDeterminismError]] = field(default_factory=list)
    skipped: list[tuple[Run, str]] = field(default_factory=list)


PAGE = 200  # runs read per page


async def replay_stored(
    store: Reads,
    registry: Registry,
    *,
    workflow: str | None = None,
    statuses: Sequence[RunStatus | None] = (None,),
    limit: int = 1000,
) -> ReplayReport:
    """Replay the stored runs of ``registry``'s workflows (or of ``workflow``) with each of
    ``statuses`` (None: any), newest first, at most ``limit`` of them, against its code."""
    report = ReplayReport()
    names = [workflow] if workflow is not None else registry.workflow_names
    for name in names:
        for status in statuses:
            async for run in _stored_runs(store, RunQuery(workflow=name, status=status)):
                if report.checked + len(report.skipped) >= limit:
                    return report
                await _replay_one(store, registry, run, report)
    return report


async def _stored_runs(store: Reads, query: RunQuery) -> AsyncIterator[Run]:
    while True:
        page = await store.page_runs(query, PAGE)
        for run in page:
            yield run
        if len(page) < PAGE:
            return
        query = replace(query, after=RunCursor(page[-1].created_at, page[-1].id))


async def _replay_one(store: Reads, registry: Registry, run: Run, report: ReplayReport) -> None:
    try:
        definition = registry.workflow(run.workflow, run.version)
    except UnknownWorkflowError:
        report.skipped.append((run, f"the app has no code for version {run.version!r}"))
        return
    if not definition.has_body:
        report.skipped.append((run, "a remote workflow declared without its code"))
        return
    steps, signals = await store.list_steps(run.id), await store.list_signals(run.id)
    report.checked += 1
    try:
        await check_replay(definition, History(run, steps, signals))
    except NonDeterminismError as exc:
        report.diverged.append((run, exc))


def replay_sync(definition: WorkflowDefinition, history: History) -> None:
    """:func:`check_replay`, called from code without an event loop, or from one (it then
    replays on a loop of its own, in a thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(check_replay(definition, history))
        return
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, check_replay(definition, history)).result()


__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "History",
    "ReplayReport",
    "check_replay",
    "history_doc",
    "load_history",
    "replay_stored",
    "replay_sync",
]
