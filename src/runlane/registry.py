"""The workflows and steps one engine knows, by name (and version for workflows)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .definitions import (
    StepDefinition,
    WorkflowDefinition,
    step_definition,
    workflow_definition,
)
from .errors import DefinitionError, UnknownStepError, UnknownWorkflowError
from .models import RunStatus


class Registry:
    def __init__(self, workflows: Iterable[Any] = (), steps: Iterable[Any] = ()) -> None:
        self._workflows: dict[str, dict[str, WorkflowDefinition]] = {}
        self._latest: dict[str, WorkflowDefinition] = {}
        self._steps: dict[str, StepDefinition] = {}
        for wf in workflows:
            self.add_workflow(wf)
        for st in steps:
            self.add_step(st)
        self._add_handlers()

    @property
    def workflow_names(self) -> list[str]:
        return sorted(self._latest)

    def _add_handlers(self) -> None:
        """Register the failure handlers given as workflows that are not registered by name
        (after every workflow given, so those win), then check that every handler named is
        registered: a run's settlement starts it."""
        pending = self.every_version
        while pending:
            definition = pending.pop()
            for handler in definition.given_handlers:
                if handler.name not in self._workflows:
                    pending.append(self.add_workflow(handler))
            missing = [h for h in definition.handlers if h not in self._workflows]
            if missing:
                raise DefinitionError(
                    f"workflow {definition.name!r} names {missing[0]!r} as a failure handler,"
                    " but no workflow of that name is registered"
                )

    def add_workflow(self, obj: Any) -> WorkflowDefinition:
        definition = obj if isinstance(obj, WorkflowDefinition) else workflow_definition(obj)
        versions = self._workflows.setdefault(definition.name, {})
        if definition.version in versions:
            raise DefinitionError(
                f"workflow {definition.name!r} version {definition.version!r} is already registered"
            )
        versions[definition.version] = definition
        self._latest[definition.name] = definition
        return definition

    def add_step(self, obj: Any) -> StepDefinition:
        definition = obj if isinstance(obj, StepDefinition) else step_definition(obj)
        existing = self._steps.get(definition.name)
        if existing is not None and existing.fn is not definition.fn:
            raise DefinitionError(f"step {definition.name!r} is already registered")
        self._steps[definition.name] = definition
        return definition

    def workflow(self, ref: Any, version: str | None = None) -> WorkflowDefinition:
        """The definition named by ``ref`` (a name or decorated function), latest version by default."""
        name = ref if isinstance(ref, str) else workflow_definition(ref).name
        if version is None:
            found = self._latest.get(name)
        else:
            found = self._workflows.get(name, {}).get(version)
        if found is None:
            raise UnknownWorkflowError(name if version is None else f"{name}@{version}")
        return found

    def subscribers(self, event: str) -> list[WorkflowDefinition]:
        return [d for d in self._latest.values() if event in d.on_event]

    def step(self, ref: Callable[..., Any] | str, group: str | None = None) -> StepDefinition:
        if not isinstance(ref, str):
            return step_definition(ref)
        found = self._steps.get(ref)
        if found is not None:
            return found
        if group is not None:
            return StepDefinition(name=ref, fn=None, group=group)
        raise UnknownStepError(ref)

    @property
    def dead_letters(self) -> frozenset[str]:
        """The workflows whose dead runs start a handler (in some version of them)."""
        return frozenset(
            name
            for name, versions in self._workflows.items()
            if any(d.handler(RunStatus.DEAD) for d in versions.values())
        )

    @property
    def workflows(self) -> list[WorkflowDefinition]:
        return list(self._latest.values())

    @property
    def every_version(self) -> list[WorkflowDefinition]:
        """Every registered definition: each version of each workflow."""
        return [d for versions in self._workflows.values() for d in versions.values()]

    @property
    def steps(self) -> list[StepDefinition]:
        return list(self._steps.values())
