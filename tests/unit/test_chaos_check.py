"""The chaos run's invariant checker catches each broken invariant (chaos/check.py).

A chaos run that passes proves something only if its checker would have failed it: each test
hands the checker evidence with one offence in it, and one case of what must not count.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from chaos.app import DOOMED
from chaos.check import Evidence, Execution, Freeze, check
from runlane import Run, RunStatus, StepRecord

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _run(run_id: str, workflow: str, status: str = "completed", **fields: Any) -> Run:
    values: dict[str, Any] = {
        "id": run_id,
        "workflow": workflow,
        "version": "1",
        "status": RunStatus(status),
        "input": {},
        "output": None,
        "error": None,
        "tags": (),
        "created_at": T0,
        "updated_at": T0,
        "wake_at": None,
        "parent_id": None,
        "namespace": None,
        "priority": 0,
    }
    return Run(**{**values, **fields})


def _step(run_id: str, seq: int, label: str, token: str) -> StepRecord:
    return StepRecord(run_id, seq, "c.local", "step", "completed", [run_id, label, "-"], token)


def _plain(run_id: str, labels: str = "abc") -> tuple[Run, list[StepRecord], list[Execution]]:
    """A completed c.plain run whose records and log agree."""
    tokens = {label: f"{run_id}-{label}" for label in labels}
    run = _run(run_id, "c.plain", output={"tokens": tokens})
    records = [_step(run_id, i + 1, label, tokens[label]) for i, label in enumerate(labels)]
    log = [_exec(run_id, label, 1.0 + i, token=tokens[label]) for i, label in enumerate(labels)]
    return run, records, log


def _exec(
    run: str, label: str, start: float, end: float | None = None, *, lane: str = "-", **kw: Any
) -> Execution:
    fields = {"pid": 1, "kind": "local", "token": f"{run}-{label}", **kw}
    return Execution(run, label, lane=lane, start=start, end=end or start + 0.1, **fields)


def _evidence(
    runs: list[Run],
    steps: dict[str, list[StepRecord]] | None = None,
    executions: Sequence[Execution] = (),
    record: Sequence[dict[str, Any]] = (),
    freezes: Sequence[Freeze] = (),
) -> Evidence:
    started = [{"event": "started", "run": r.id, "workflow": r.workflow} for r in runs]
    return Evidence(
        runs={r.id: r for r in runs},
        steps=steps or {},
        executions=list(executions),
        record=[*started, *record],
        freezes=list(freezes),
        died=[],
    )


def _counts(evidence: Evidence) -> dict[str, int]:
    return {k: len(v) for k, v in check(evidence).offences.items() if v}


def _lane_runs(workflow: str, *ids: str) -> list[Run]:
    return [
        _run(run_id, workflow, "running", created_at=T0 + timedelta(seconds=i))
        for i, run_id in enumerate(ids)
    ]


def test_a_plain_run_that_completed_as_recorded_breaks_nothing() -> None:
    run, records, log = _plain("p1")
    assert _counts(_evidence([run], {"p1": records}, log)) == {}


def test_a_run_missing_or_not_terminal_is_lost_or_stuck() -> None:
    run, records, log = _plain("p1")
    evidence = _evidence([run], {"p1": records}, log)
    evidence.record.append({"event": "started", "run": "p2", "workflow": "c.plain"})
    continued = _run("ch1", "c.chain", output={"continued_as": "ch1~1"})
    evidence.runs["ch1"] = continued
    evidence.steps["ch1"] = [_step("ch1", 1, "a", "x")]
    evidence.runs["s1"] = _run("s1", "c.sleepy", "suspended")
    counts = _counts(evidence)
    assert counts["lost"] == 2  # the acknowledged p2, the continuation ch1~1
    assert counts["stuck"] == 1


def test_an_outage_error_as_a_run_outcome_is_caught_and_the_workloads_own_failure_is_not() -> None:
    own = _run("d1", "c.doomed", "failed", error={"type": "WorkloadFailure", "message": DOOMED})
    infra = _run("p1", "c.plain", "failed", error={"type": "AdminShutdown", "message": "bye"})
    assert _counts(_evidence([own, infra]))["infrastructure_outcome"] == 1


def test_a_cancel_nobody_asked_for_is_caught() -> None:
    asked = _run("s1", "c.sleepy", "cancelled")
    unasked = _run("s2", "c.sleepy", "cancelled")
    evidence = _evidence([asked, unasked], record=[{"event": "cancel", "run": "s1"}])
    assert _counts(evidence) == {"cancelled_unasked": 1}


def test_checkpoints_not_exactly_one_to_n_are_caught() -> None:
    run, records, log = _plain("p1")
    assert _counts(_evidence([run], {"p1": records[:2]}, log))["checkpoints"] == 1


def test_a_record_that_is_not_the_result_the_run_consumed_is_caught() -> None:
    run, records, log = _plain("p1")
    records[1] = _step("p1", 2, "b", "a-later-execution")
    assert _counts(_evidence([run], {"p1": records}, log)) == {"result_twice": 1}


def test_a_step_executed_three_times_is_caught() -> None:
    run, records, log = _plain("p1")
    log += [_exec("p1", "c", 5.0, token="again"), _exec("p1", "c", 6.0, token="and again")]
    assert _counts(_evidence([run], {"p1": records}, log)) == {"executed_over_twice": 1}


def test_overlapping_bodies_of_one_singleton_key_are_caught() -> None:
    lane = "s:queue:0"
    runs = _lane_runs("c.queue", "q1", "q2", "q3")
    log = [
        _exec("q1", "a", 1.0, lane=lane),
        _exec("q1", "b", 2.0, 2.5, lane=lane),
        _exec("q2", "a", 2.4, lane=lane),  # before q1 ended
        _exec("q3", "a", 4.0, lane=lane),
    ]
    assert _counts(_evidence(runs, executions=log)) == {"overlap": 1, "stuck": 3}


def test_a_waiter_admitted_before_an_older_one_breaks_fifo() -> None:
    lane = "s:queue:0"
    runs = _lane_runs("c.queue", "q1", "q2", "q3")
    log = [
        _exec("q1", "a", 1.0, lane=lane),
        _exec("q3", "a", 2.0, lane=lane),
        _exec("q2", "a", 3.0, lane=lane),
    ]
    assert _counts(_evidence(runs, executions=log))["fifo"] == 1


def test_more_bodies_of_a_quota_key_than_its_limit_are_caught() -> None:
    lane = "c:0"
    runs = _lane_runs("c.quota", "k1", "k2", "k3", "k4")
    log = [
        _exec("k1", "a", 1.0, 3.0, lane=lane),
        _exec("k2", "a", 1.5, 3.0, lane=lane),
        _exec("k3", "a", 3.0, 4.0, lane=lane),  # starts as two end: within the limit
        _exec("k4", "a", 3.5, 4.0, lane=lane),
    ]
    assert "quota" not in _counts(_evidence(runs, executions=log))
    log.append(_exec("k4", "b", 2.0, lane=lane))  # now k4's body began at 2.0
    assert _counts(_evidence(runs, executions=log))["quota"] == 1


def test_a_step_in_flight_across_a_freeze_is_reported_apart_and_what_follows_is_checked() -> None:
    lane = "s:queue:0"
    runs = _lane_runs("c.queue", "q1", "q2")
    freeze = Freeze(pid=7, stopped=1.05, resumed=6.0)
    log = [
        _exec("q1", "a", 1.0, 6.01, lane=lane, pid=7),  # in flight when pid 7 was stopped
        _exec("q1", "a", 4.0, lane=lane, pid=8, token="recovered"),
        _exec("q1", "b", 4.2, lane=lane, pid=8),
        _exec("q2", "a", 5.0, lane=lane, pid=8),
    ]
    findings = check(_evidence(runs, executions=log, freezes=[freeze]))
    assert not findings.offences["overlap"]
    assert len(findings.frozen) == 1 and len(findings.frozen_overlaps) == 1
    log.append(_exec("q1", "b", 6.02, lane=lane, pid=7))  # the resumed process goes on
    findings = check(_evidence(runs, executions=log, freezes=[freeze]))
    assert len(findings.offences["stale_start"]) == 1


def test_a_signal_run_that_got_another_payload_is_caught() -> None:
    tokens = {"a": "s-00007-a", "b": "s-00007-b"}
    run = _run("signal-00007", "c.signal", output={"tokens": tokens, "signal": {"n": 8}})
    records = [_step(run.id, 1, "a", tokens["a"]), _step(run.id, 3, "b", tokens["b"])]
    records.insert(1, StepRecord(run.id, 2, "go", "signal", "completed"))
    log = [_exec(run.id, label, 1.0, token=token) for label, token in tokens.items()]
    assert _counts(_evidence([run], {run.id: records}, log)) == {"signal": 1}
