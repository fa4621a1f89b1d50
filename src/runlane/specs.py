"""The specs of new runs: a start's, a child's, a continuation's, a failure handler's.

Every new run is described by a :class:`~runlane.models.RunSpec` with its gates (singleton,
quota, rate limit, debounce) evaluated on its input, before anything is written: the store
admits or refuses it atomically when it creates the run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Literal

from . import admission
from .attributes import AttributeValue
from .definitions import Concurrency, WorkflowDefinition
from .errors import UnsupportedStoreError
from .models import JSON, RetryTimer, Run, RunSpec, Settlement, SingletonGate
from .registry import Registry
from .serialization import normalise
from .stores.base import Store


class RunSpecs:
    """Builds the specs of one engine's new runs (its registry, its store, its clock)."""

    def __init__(
        self,
        registry: Registry,
        store: Store,
        now: Callable[[], datetime],
        namespace: str | None,
        retry: Callable[[], RetryTimer],
        scope: str | None = None,
    ) -> None:
        self.registry = registry
        self.store = store
        self.now = now
        self.namespace = namespace
        self.retry = retry
        # The namespace whose own keys new runs get (an engine with scope_reads), or None:
        # their keys are shared by every namespace.
        self.scope = scope

    async def build(
        self,
        definition: WorkflowDefinition,
        input: JSON,
        run_id: str,
        *,
        parent: Run | None = None,
        concurrency: Concurrency | None = None,
        priority: int = 0,
        tags: Sequence[str] = (),
        lane: SingletonGate | Literal["workflow"] | None = "workflow",
        debounce: bool = False,
        execution_timeout: float | None = None,
        detached: bool = False,
        attributes: Mapping[str, AttributeValue] | None = None,
    ) -> RunSpec:
        """The spec of a new run, with its gates (singleton, quota, rate limit, and with
        ``debounce`` its debounce) evaluated on ``input``.

        ``lane`` replaces the workflow's singleton gate (a schedule's overlap lane). Only starts
        from outside a run are debounced (``start``, event subscribers): a child's or a
        schedule window's run id must name a run of its own. With a ``scope``, every gate's
        key but a ``lane`` given is that namespace's own (``admission.scoped_key``).

        Its deadline is ``execution_timeout`` (else the workflow's) seconds from now; a child's
        is never later than its parent's, unless it is ``detached`` (a parent's cancellation
        leaves such a child running)."""
        if not isinstance(run_id, str) or not run_id:
            raise ValueError("run_id must be a non-empty string")
        singleton = admission.singleton_gate(definition, input) if lane == "workflow" else lane
        if singleton is not None:  # a waiter's fallback timer, should it be created parked
            singleton = replace(singleton, retry=self.retry().delay(0))
        rule = concurrency or definition.concurrency
        quota = await admission.quota_gate(rule, input, definition.name)
        rate = admission.rate_gate(definition, input)
        folded = admission.debounce_gate(definition, input) if debounce else None
        if (singleton or quota or rate or folded) and not self.store.atomic_admission:
            raise UnsupportedStoreError(
                f"{type(self.store).__name__} cannot admit gated or limited runs atomically"
            )
        now = self.now()
        timeout = definition.execution_timeout if execution_timeout is None else execution_timeout
        deadline = now + timedelta(seconds=timeout) if timeout is not None else None
        if parent is not None and parent.deadline_at is not None and not detached:
            deadline = parent.deadline_at if deadline is None else min(deadline, parent.deadline_at)
        spec = RunSpec(
            id=run_id,
            workflow=definition.name,
            version=definition.version,
            input=input,
            created_at=now,
            tags=tuple(
                dict.fromkeys((*definition.tags, *tags, *admission.lane_tags(singleton, quota)))
            ),
            parent_id=parent.id if parent else None,
            namespace=parent.namespace if parent else self.namespace,
            priority=parent.priority if parent and not priority else priority,
            deadline_at=deadline,
            attributes=attributes or {},
            singleton=singleton,
            quota=quota,
            rate=rate,
            debounce=folded,
            detached=detached,
        )
        if self.scope is None:
            return spec
        scoped = admission.scoped_gates(spec, self.scope)
        # A schedule's overlap lane is the schedule's, and schedules are shared by the store.
        return scoped if lane == "workflow" else replace(scoped, singleton=spec.singleton)

    async def child(
        self, workflow: Any, input: JSON, run_id: str, parent: Run, *, detached: bool = False
    ) -> RunSpec:
        definition = self.registry.workflow(workflow)
        return await self.build(definition, input, run_id, parent=parent, detached=detached)

    async def continuation(self, run: Run, input: JSON) -> RunSpec:
        next_id = continuation_id(run.id)
        definition = self.registry.workflow(run.workflow)
        # The new input may name other lanes: the run's own lane tags do not carry over.
        inherited = (*definition.tags, *admission.run_lane_tags(run))
        user_tags = tuple(t for t in run.tags if t not in inherited)
        # The continuation carries on the run: its attributes still find it.
        spec = await self.build(
            definition,
            input,
            next_id,
            priority=run.priority,
            tags=user_tags,
            attributes=run.attributes,
        )
        return replace(spec, namespace=run.namespace)

    async def handler(self, workflow: str, run: Run, settlement: Settlement) -> RunSpec:
        """The start of ``workflow`` as the failure handler of ``run`` settling so: its input
        says which run ended how, its id counts the run's failures (``failure_id``), and its
        gates are evaluated as any start's."""
        value = {
            "run_id": run.id,
            "workflow": run.workflow,
            "input": run.input,
            "error": settlement.error,
            "status": str(settlement.status),
        }
        definition = self.registry.workflow(workflow)
        value = normalise(value, f"input of failure handler {workflow!r}")
        spec = await self.build(definition, value, failure_id(run), priority=run.priority)
        return replace(spec, namespace=run.namespace)


def failure_id(run: Run) -> str:
    """``<id>.failure.<n>``: the failure handler run of the run's n-th failure (from 1)."""
    return f"{run.id}.failure.{run.failures + 1}"


def continuation_id(run_id: str) -> str:
    """``<id>~1`` for a first continuation, then ``~2``, ``~3``, ..."""
    base, _, n = run_id.rpartition("~")
    return f"{base}~{int(n) + 1}" if base and n.isdigit() else f"{run_id}~1"


__all__ = ["RunSpecs", "continuation_id", "failure_id"]
