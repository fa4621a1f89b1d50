"""The workflows and steps one engine knows, by name (and version for workflows)."""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Callable, Iterable
from typing import Any

from .definitions import (
    WORKFLOW_ATTR,
    StepDefinition,
    WorkflowDefinition,
    step_definition,
    workflow_definition,
)
from .errors import DefinitionError, UnknownStepError, UnknownWorkflowError
from .models import RunStatus, Serves


def compare_versions(a: str, b: str) -> int:
    """Order two versions of a workflow: as integers when both are digits, else as strings."""
    if a.isdigit() and b.isdigit():
        return (int(a) > int(b)) - (int(a) < int(b))
    return (a > b) - (a < b)


def latest_version(versions: Iterable[str]) -> str:
    """The latest of ``versions`` (see ``compare_versions``)."""
    return max(versions, key=functools.cmp_to_key(compare_versions))


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
        """Register the failure handlers given as workflows and the decorated children a body
        names, unless a workflow of that name is registered (after every workflow given, so
        those win); then check that every handler named is registered: a run's settlement
        starts it."""
        pending = self.every_version
        while pending:
            definition = pending.pop()
            for brought in (*definition.given_handlers, *named_workflows(definition.fn)):
                if brought.name not in self._workflows:
                    pending.append(self.add_workflow(brought))
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
        self._latest[definition.name] = versions[latest_version(versions)]
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
        """The latest version of each workflow."""
        return list(self._latest.values())

    @property
    def every_version(self) -> list[WorkflowDefinition]:
        """Every registered definition: each version of each workflow."""
        return [d for versions in self._workflows.values() for d in versions.values()]

    @property
    def serves(self) -> Serves:
        """The ``(workflow, version)`` pairs whose runs this registry can replay (or, for a
        remote workflow, have its workers replay)."""
        return Serves(frozenset((d.name, d.version) for d in self.every_version))

    @property
    def steps(self) -> list[StepDefinition]:
        return list(self._steps.values())


def named_workflows(fn: Callable[..., Any]) -> list[WorkflowDefinition]:
    """The decorated workflows a workflow body names, so a child it starts is known to every
    engine that registers it: a global or closure variable of the body (or of a comprehension
    or function nested in it), or an attribute of a module it names (``shipping.ship_item``).
    A child named by a string is not found: that one must be registered."""
    names = _code_names(fn.__code__)
    scope: dict[str, Any] = dict(getattr(fn, "__globals__", {}))
    cells = zip(fn.__code__.co_freevars, getattr(fn, "__closure__", None) or (), strict=False)
    for name, cell in cells:
        with contextlib.suppress(ValueError):  # a cell not filled yet
            scope[name] = cell.cell_contents
    found = [scope[name] for name in names if name in scope]
    modules = [value for value in scope.values() if isinstance(value, types.ModuleType)]
    found += [getattr(m, name) for m in modules for name in names if hasattr(m, name)]
    workflows = [getattr(value, WORKFLOW_ATTR, None) for value in found]
    return [w for w in workflows if isinstance(w, WorkflowDefinition)]


def _code_names(code: types.CodeType) -> set[str]:
    """The global, attribute and free names a code object and those nested in it use."""
    names = set(code.co_names) | set(code.co_freevars)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names
