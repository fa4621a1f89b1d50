"""An engine's reads fenced to its namespace: ``Engine(namespace="eu", scope_reads=True)``.

By default a store's reads are shared: every engine on the store sees every namespace's runs.
An engine with ``scope_reads`` reads through :class:`NamespaceReads` instead, the one place its
reads are fenced: its own reads (``get_run``, ``list_runs``, ``list_steps``, the operations
that look a run up first) and every view built on ``Engine.read`` (the HTTP API, the console,
the metrics, the command line) see only the runs of its namespace; a run of another namespace
is as if it did not exist.

Admission is fenced elsewhere, by the keys a scoped engine stores
(:func:`runlane.admission.scoped_key`): the stores count and lock per stored key, so nothing
here takes part in it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from .activity import ActivityCount
from .attributes import AttributeValue
from .models import (
    AuditEntry,
    EngineInfo,
    LaneMember,
    Run,
    RunQuery,
    RunStatus,
    Signal,
    StepRecord,
)
from .step_queues import QueueView
from .stores.base import Reads


class NamespaceReads:
    """``store``'s reads as an engine fenced to ``namespace`` sees them: the runs of
    ``namespace`` only (and their steps, signals, lanes and counts). A filter naming another
    namespace finds nothing. Step queues are shared by every namespace: a queue's view keeps
    only this namespace's steps. Engines: those of this namespace, and those of every
    namespace (an engine without one executes this namespace's runs too)."""

    def __init__(self, store: Reads, namespace: str) -> None:
        self.store = store
        self.namespace = namespace

    def _ours(self, run: Run | None) -> Run | None:
        return run if run is not None and sees(self.namespace, run) else None

    def _narrowed(self, namespace: str | None) -> str | None:
        """The namespace a filter asks for, within this one: None when it names another."""
        return self.namespace if namespace in (None, self.namespace) else None

    async def get_run(self, run_id: str) -> Run | None:
        return self._ours(await self.store.get_run(run_id))

    async def get_runs(self, run_ids: Sequence[str]) -> dict[str, Run]:
        found = await self.store.get_runs(run_ids)
        return {run_id: run for run_id, run in found.items() if self._ours(run)}

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
        wanted = self._narrowed(namespace)
        if wanted is None:
            return []
        return await self.store.list_runs(
            workflow=workflow,
            status=status,
            tag=tag,
            parent_id=parent_id,
            namespace=wanted,
            limit=limit,
            offset=offset,
            attributes=attributes,
        )

    async def page_runs(self, query: RunQuery, limit: int) -> list[Run]:
        wanted = self._narrowed(query.namespace)
        if wanted is None:
            return []
        return await self.store.page_runs(replace(query, namespace=wanted), limit)

    async def count_runs(self, query: RunQuery) -> dict[RunStatus, int]:
        wanted = self._narrowed(query.namespace)
        if wanted is None:
            return {}
        return await self.store.count_runs(replace(query, namespace=wanted))

    async def active_run_counts(
        self, namespace: str | None = None
    ) -> dict[tuple[str, RunStatus], int]:
        wanted = self._narrowed(namespace)
        return {} if wanted is None else await self.store.active_run_counts(wanted)

    async def active_code_counts(self, namespace: str | None = None) -> dict[tuple[str, str], int]:
        wanted = self._narrowed(namespace)
        return {} if wanted is None else await self.store.active_code_counts(wanted)

    async def run_activity(
        self, since: datetime, until: datetime, namespace: str | None = None
    ) -> list[ActivityCount]:
        wanted = self._narrowed(namespace)
        return [] if wanted is None else await self.store.run_activity(since, until, wanted)

    async def list_engines(self) -> list[EngineInfo]:
        engines = await self.store.list_engines()
        return [e for e in engines if e.namespace in (None, self.namespace)]

    async def lane_runs(self, lane: str | None = None) -> list[Run]:
        return [run for run in await self.store.lane_runs(lane) if self._ours(run)]

    async def lane_members(
        self, shown: int, namespace: str | None = None, key: str | None = None
    ) -> list[LaneMember]:
        wanted = self._narrowed(namespace)
        return [] if wanted is None else await self.store.lane_members(shown, wanted, key)

    async def limited_runs(self, now: datetime) -> list[Run]:
        return [run for run in await self.store.limited_runs(now) if self._ours(run)]

    async def queue_views(self) -> list[QueueView]:
        views = await self.store.queue_views()
        ours = await self.get_runs(sorted({e.run_id for v in views for e in v.entries}))
        return [replace(v, entries=tuple(e for e in v.entries if e.run_id in ours)) for v in views]

    async def get_step(self, run_id: str, seq: int) -> StepRecord | None:
        return await self.store.get_step(run_id, seq) if await self.get_run(run_id) else None

    async def list_steps(self, run_id: str) -> list[StepRecord]:
        return await self.store.list_steps(run_id) if await self.get_run(run_id) else []

    async def list_signals(self, run_id: str) -> list[Signal]:
        return await self.store.list_signals(run_id) if await self.get_run(run_id) else []

    async def list_audit(
        self, limit: int, *, before: int | None = None, namespace: str | None = None
    ) -> list[AuditEntry]:
        return await self.store.list_audit(limit, before=before, namespace=self.namespace)


def sees(namespace: str | None, run: Run) -> bool:
    """Whether an engine fenced to ``namespace`` (None: not fenced) sees ``run``."""
    return namespace is None or run.namespace == namespace


def fenced(store: Reads, namespace: str | None) -> Reads:
    """``store``'s reads as an engine fenced to ``namespace`` sees them (None: unfenced)."""
    return store if namespace is None else NamespaceReads(store, namespace)


__all__ = ["NamespaceReads", "fenced", "sees"]
