"""``models.evolved`` copies a run as ``dataclasses.replace`` would, and every run
transformation built on it returns a whole, valid run."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runlane.models import (
    Lease,
    QuotaGate,
    Run,
    RunSpec,
    RunStatus,
    Settlement,
    SingletonGate,
    admitted_run,
    awaiting_decision,
    claimed_run,
    evolved,
    leased_run,
    requeued_run,
    run_from_spec,
    settled_run,
    suspended_run,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
FIELDS = [f.name for f in dataclasses.fields(Run)]


def full_run() -> Run:
    """A run with no field left at its default."""
    return Run(
        id="r", workflow="wf", version="1", status=RunStatus.RUNNING, input={"a": [1]},
        output=None, error={"type": "E"}, tags=("t",), created_at=T0, updated_at=T0,
        wake_at=T0, parent_id="p", namespace="ns", priority=3, singleton_key="k",
        singleton_limit=2, holds_slot=True, concurrency_key="q", lease_owner="o",
        lease_expires_at=T0, deadline_at=T0, recoveries=1, wake_requested_at=T0,
        concurrency_limit=4, concurrency_statuses=frozenset({RunStatus.RUNNING}),
        admission_retries=2, queued=True, failures=1, rate_key="rk", rate_at=T0,
        rate_limit=5, rate_until=T0, handoff_at=T0, begin_at=T0, debounce_key="dk",
        awaiting_decision_task_id="task",
    )  # fmt: skip


values = st.one_of(st.none(), st.integers(), st.text(max_size=3), st.booleans())


# What is checked is equality, not speed: a loaded machine must not fail it on time.
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(FIELDS), values, max_size=8))
def test_evolved_equals_dataclasses_replace(changes: dict[str, Any]) -> None:
    run = full_run()
    copy = evolved(run, **changes)
    expected = dataclasses.replace(run, **changes)
    assert copy == expected
    assert list(vars(copy)) == list(vars(expected))
    assert run == full_run()  # the original is untouched
    with pytest.raises(dataclasses.FrozenInstanceError):
        copy.status = RunStatus.FAILED  # type: ignore[misc]


@pytest.mark.parametrize("gated", [False, True])
def test_a_run_from_a_spec_equals_the_one_its_constructor_makes(gated: bool) -> None:
    spec = RunSpec(
        "r", "wf", "1", {"a": [1]}, T0, tags=("t", "u"), parent_id="p", namespace="ns",
        priority=2, deadline_at=T0 + timedelta(seconds=5),
        singleton=SingletonGate("3:wf:k", 2) if gated else None,
        quota=QuotaGate("q", 4, frozenset({RunStatus.RUNNING})) if gated else None,
    )  # fmt: skip
    run = run_from_spec(spec)
    expected = Run(
        id="r", workflow="wf", version="1", status=RunStatus.PENDING, input={"a": [1]},
        output=None, error=None, tags=("t", "u"), created_at=T0, updated_at=T0, wake_at=None,
        parent_id="p", namespace="ns", priority=2, deadline_at=T0 + timedelta(seconds=5),
        singleton_key="3:wf:k" if gated else None, singleton_limit=2 if gated else None,
        concurrency_key="q" if gated else None, concurrency_limit=4 if gated else None,
        concurrency_statuses=frozenset({RunStatus.RUNNING}) if gated else None,
    )  # fmt: skip
    assert run == expected
    assert list(vars(run)) == FIELDS  # every field, in the constructor's order
    assert run_from_spec(spec) is not run  # a new run each time, the template untouched
    assert run_from_spec(RunSpec("s", "wf", "1", None, T0)).singleton_key is None


def test_evolved_refuses_a_name_that_is_not_a_field() -> None:
    with pytest.raises(AssertionError, match="statuss"):
        evolved(full_run(), statuss=RunStatus.FAILED)


def test_each_transformation_returns_a_run_with_every_field() -> None:
    run, later = full_run(), T0 + timedelta(seconds=5)
    lease = Lease("me", later)
    for result in [
        leased_run(run, lease),
        claimed_run(run, lease, later),
        admitted_run(run),
        suspended_run(run, later, later),
        awaiting_decision(run, "t2", later, later),
        settled_run(run, Settlement(RunStatus.COMPLETED, {"ok": 1}), later),
        requeued_run(run, later, None),
    ]:
        assert type(result) is Run and list(vars(result)) == FIELDS
        assert result == dataclasses.replace(result)  # a consistent, comparable run
