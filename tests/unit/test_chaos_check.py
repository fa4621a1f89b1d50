"""The chaos run's invariant checker catches each broken invariant (chaos/check.py).

A chaos run that passes proves something only if its checker would have failed it: each test
hands the checker evidence with one offence in it, and one case of what must not count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from chaos.app import DOOMED
from chaos.check import Evidence, Execution, Freeze, QueueAdmission, QueueEntry, check
from chaos.failover import StoreState, losses
from chaos.report import offenders
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


def test_a_stuck_run_is_reported_with_what_it_waits_on() -> None:
    # The console is all a failed CI run leaves: it must say why the run did not end.
    blocked = _run("q1", "c.stepq", "blocked", wake_at=T0)
    evidence = _evidence([blocked], {"q1": [_step("q1", 1, "a", "x")]})
    evidence.entries = [QueueEntry("slots", "q1", 1, True), QueueEntry("slots", "q1", 3, False)]
    [line] = check(evidence).offences["stuck"]
    assert line == (
        "q1 blocked wake_at=2026-01-01T00:00:00+00:00 lease=None steps=[1:completed]"
        " entries=[slots#1:holds slots#3:waits]"
    )


def test_an_outage_error_as_a_run_outcome_is_caught_and_the_workloads_own_failure_is_not() -> None:
    own = _run("d1", "c.doomed", "failed", error={"type": "WorkloadFailure", "message": DOOMED})
    infra = _run("p1", "c.plain", "failed", error={"type": "AdminShutdown", "message": "bye"})
    assert _counts(_evidence([own, infra]))["infrastructure_outcome"] == 1


def test_a_cancel_nobody_asked_for_is_caught() -> None:
    asked = _run("s1", "c.sleepy", "cancelled")
    unasked = _run("s2", "c.sleepy", "cancelled")
    evidence = _evidence([asked, unasked], record=[{"event": "cancel", "run": "s1"}])
    assert _counts(evidence) == {"cancelled_unasked": 1}


def test_a_cancel_reaches_descendants_through_a_child_that_ended_but_not_a_detached_one() -> None:
    # A cancelled fan: its child completed after starting a grandchild, which the cancel
    # reached; a detached grandchild's own child is never reached.
    fan = _run("f1", "c.fan", "cancelled")
    child = _run("f1.c", "c.leaf", "completed", parent_id="f1")
    grandchild = _run("f1.c.g", "c.fresh", "cancelled", parent_id="f1.c")
    detached = _run("f1.d", "c.fresh", "completed", parent_id="f1", detached=True)
    below = _run("f1.d.g", "c.fresh", "cancelled", parent_id="f1.d")
    runs = [fan, child, grandchild, detached, below]
    evidence = _evidence(runs, record=[{"event": "cancel", "run": "f1"}])
    assert check(evidence).offences["cancelled_unasked"] == ["f1.d.g"]


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


def test_a_waiter_passing_an_older_one_that_was_paused_keeps_fifo() -> None:
    # A paused run waits in no line: q3 admitted during q2's pause, or just after its resume
    # (admitted before it), has not jumped it; once q2 is back in line, q4 has.
    lane = "s:queue:0"
    runs = _lane_runs("c.queue", "q1", "q2", "q3", "q4", "q5")
    pause = [
        {"event": "pause", "run": "q2", "t": 1.5},
        {"event": "paused", "run": "q2", "t": 1.6, "result": True},
        {"event": "resume", "run": "q2", "t": 2.9},
        {"event": "resumed", "run": "q2", "t": 3.0, "result": True},
    ]
    log = [
        _exec("q1", "a", 1.0, lane=lane),
        _exec("q3", "a", 2.0, lane=lane),
        _exec("q4", "a", 4.0, lane=lane),
        _exec("q2", "a", 10.0, lane=lane),
        _exec("q5", "a", 11.0, lane=lane),
    ]
    assert "fifo" not in _counts(_evidence(runs, executions=log, record=pause))
    late = [*log[:2], _exec("q4", "a", 9.0, lane=lane), *log[3:]]
    assert _counts(_evidence(runs, executions=late, record=pause))["fifo"] == 1


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


def _queued(run_id: str, labels: str, log: list[Execution]) -> tuple[Run, list[StepRecord]]:
    """A completed c.stepq run whose records hold the tokens of its executions in ``log``."""
    tokens: dict[str, str] = {}
    for e in log:
        if e.run == run_id:
            tokens.setdefault(e.label, e.token)  # the first execution's result is recorded
    records = [
        StepRecord(run_id, i + 1, "c.local", "step", "completed", [run_id, x, "q:cq.slots"], t)
        for i, (x, t) in enumerate(sorted(tokens.items()))
    ]
    return _run(run_id, "c.stepq", output={"tokens": tokens}), records


def test_more_recorded_attempts_in_a_step_queue_than_its_slots_are_caught() -> None:
    lane = "q:cq.slots"  # concurrency 2
    log = [
        _exec("s1", "a", 1.0, 2.0, lane=lane),
        _exec("s2", "a", 1.5, 2.5, lane=lane),
        _exec("s3", "a", 2.0, 3.0, lane=lane),  # as s1 ends: within the slots
        # A duplicate of s2/a whose result was not recorded: no slot covers it.
        _exec("s2", "a", 2.2, 2.4, lane=lane, token="duplicate"),
    ]
    runs, steps = [], {}
    for run_id in ("s1", "s2", "s3"):
        run, records = _queued(run_id, "a", log)
        runs.append(run)
        steps[run_id] = records
    findings = check(_evidence(runs, steps, log))
    assert not findings.offences["queue_concurrency"] and len(findings.unrecorded) == 1
    log.append(_exec("s3", "b", 1.8, 1.9, lane=lane))  # a third recorded attempt in flight
    run, steps["s3"] = _queued("s3", "ab", log)
    findings = check(_evidence([*runs[:2], run], steps, log))
    assert len(findings.offences["queue_concurrency"]) == 1


def test_more_admissions_of_a_rate_limited_queue_in_one_window_are_caught() -> None:
    base = datetime(2026, 1, 1, 0, 0, 10, tzinfo=UTC)  # cq.metered: 4 per fixed 1 s window
    at = [base + timedelta(seconds=s) for s in (0.0, 0.2, 0.5, 0.99, 1.0, 1.5)]
    admissions = [QueueAdmission("cq.metered", f"m{i}", 1, t) for i, t in enumerate(at)]
    evidence = _evidence([])
    evidence.admissions = admissions
    assert "queue_rate" not in _counts(evidence)
    evidence.admissions.append(QueueAdmission("cq.metered", "m9", 2, base + timedelta(seconds=0.7)))
    assert _counts(evidence)["queue_rate"] == 1


def _limited(run_id: str, workflow: str, key: str, rate_at: float, **fields: Any) -> Run:
    at = T0 + timedelta(seconds=rate_at)
    return _run(run_id, workflow, **{"created_at": at, "rate_key": key, "rate_at": at, **fields})


def test_more_runs_of_a_rate_limited_key_in_a_sliding_window_are_caught() -> None:
    # c.limited: 2 per any 4 s. 0, 1, 4, 5 fits; 0, 1, 3.9 does not (key B's own window).
    runs = [_limited(f"l{i}", "c.limited", "A", t) for i, t in enumerate((0.0, 1.0, 4.0, 5.0))]
    assert "rate_limit" not in _counts(_evidence(runs))
    runs += [_limited(f"k{i}", "c.limited", "B", t) for i, t in enumerate((0.0, 1.0, 3.9))]
    assert _counts(_evidence(runs))["rate_limit"] == 1


def test_throttled_runs_begun_too_fast_out_of_order_or_early_are_caught() -> None:
    # c.throttled: 2 per any 2 s, in start order.
    def throttled(times: Sequence[float]) -> list[Run]:
        return [
            _limited(f"t{i}", "c.throttled", "A", t, created_at=T0 + timedelta(seconds=i))
            for i, t in enumerate(times)
        ]

    assert "throttle" not in _counts(_evidence(throttled((0.0, 1.0, 2.0, 3.0))))
    assert _counts(_evidence(throttled((0.0, 1.0, 1.5))))["throttle"] == 1  # 3 in 2 s
    assert _counts(_evidence(throttled((0.0, 3.0, 2.0))))["throttle"] == 1  # out of order
    early = _exec("t1", "a", T0.timestamp() + 0.5)  # t1's instant is T0 + 1 s
    assert _counts(_evidence(throttled((0.0, 1.0)), executions=[early]))["throttle"] == 1


def _debounced(run_id: str, created: float, begin: float, key: str = "A", **fields: Any) -> Run:
    return _run(
        run_id,
        "c.debounced",
        created_at=T0 + timedelta(seconds=created),
        begin_at=T0 + timedelta(seconds=begin),
        debounce_key=key,
        **fields,
    )


def test_two_held_runs_of_a_debounced_key_or_one_begun_early_are_caught() -> None:
    runs = [_debounced("d1", 0.0, 0.5), _debounced("d2", 0.5, 1.0), _debounced("e1", 0, 1, "B")]
    assert "debounce" not in _counts(_evidence(runs))
    runs.append(_debounced("d3", 0.9, 1.4))  # while d2 was held
    assert _counts(_evidence(runs))["debounce"] == 1
    early = _exec("d1", "a", T0.timestamp() + 0.4)
    assert _counts(_evidence(runs[:3], executions=[early]))["debounce"] == 1


def test_a_fold_into_a_begun_run_or_a_run_without_the_last_input_is_caught() -> None:
    first, last = {"key": "A", "n": 1}, {"key": "A", "n": 2}
    run = _debounced("d1", 0.0, 1.0, input=last, status="completed", output={"seen": last})
    at = T0.timestamp()

    def record(folded_at: float, folded_input: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {"event": "started", "run": "d1", "workflow": "c.debounced", "input": first},
            {
                "event": "folded",
                "run": "d1",
                "requested": "d2",
                "workflow": "c.debounced",
                "input": folded_input,
                "asked": at + folded_at,
            },
        ]

    assert "debounce" not in _counts(_evidence([run], record=record(0.5, last)))
    assert _counts(_evidence([run], record=record(1.0, last)))["debounce"] == 1  # had begun
    assert _counts(_evidence([run], record=record(0.5, first)))["debounce"] == 1  # not the last


def _remote_workflow_run(payload: Any) -> tuple[Run, list[StepRecord], list[Execution]]:
    """A completed c.rwf run (a remote workflow): local steps a, b, c, remote step r, a sleep
    and a signal wait, whose records and log agree; it got ``payload`` as its signal."""
    run_id = "rwf-00012"
    tokens = {label: f"{run_id}-{label}" for label in "arbc"}
    run = _run(run_id, "c.rwf", output={"tokens": tokens, "signal": payload})
    records = [
        _step(run_id, 1, "a", tokens["a"]),
        _step(run_id, 2, "r", tokens["r"]),
        StepRecord(run_id, 3, "sleep", "sleep", "completed"),
        StepRecord(run_id, 4, "go", "signal", "completed", output=payload),
        _step(run_id, 5, "b", tokens["b"]),
        _step(run_id, 6, "c", tokens["c"]),
    ]
    log = [_exec(run_id, label, 1.0 + i, token=t) for i, (label, t) in enumerate(tokens.items())]
    return run, records, log


def test_a_remote_workflow_run_is_held_to_its_checkpoints_and_its_signal() -> None:
    run, records, log = _remote_workflow_run({"n": 12})
    assert _counts(_evidence([run], {run.id: records}, log)) == {}
    run, records, log = _remote_workflow_run({"n": 13})
    assert _counts(_evidence([run], {run.id: records}, log)) == {"signal": 1}
    run, records, log = _remote_workflow_run({"n": 12})
    assert _counts(_evidence([run], {run.id: records[:-1]}, log)) == {
        "checkpoints": 1,
        "result_twice": 1,
    }


def test_a_member_that_died_or_hung_fails_the_run_and_is_named() -> None:
    run, records, log = _plain("p1")
    evidence = _evidence([run], {"p1": records}, log)
    evidence.died.extend([("engine-1", 4242, -11), ("producer", 4243, 1)])
    findings = check(evidence)
    assert findings.failed and _counts(evidence) == {"members_died": 2}
    shown = offenders(findings)
    assert "members_died: 2" in shown and "engine-1 (pid 4242) exit code -11" in shown


def _patched_plain(run_id: str, pid: int) -> tuple[Run, list[StepRecord], list[Execution]]:
    """A completed release-2 c.plain run: its patch marker, the patched step p, then a b c."""
    tokens = {label: f"{run_id}-{label}" for label in "pabc"}
    run = _run(run_id, "c.plain", output={"tokens": tokens})
    marker = StepRecord(run_id, 1, "chaos-deploy", "patch", "completed")
    records = [marker] + [_step(run_id, i + 2, x, tokens[x]) for i, x in enumerate("pabc")]
    log = [_exec(run_id, x, 1.0 + i, token=tokens[x], pid=pid) for i, x in enumerate("pabc")]
    return run, records, log


def test_a_run_on_code_that_does_not_have_it_breaks_the_deploy_invariant() -> None:
    run, records, log = _patched_plain("p1", pid=2)
    evidence = _evidence([run], {"p1": records}, log)
    evidence.releases = {2: "2"}
    assert _counts(evidence) == {}
    evidence.releases = {2: "1"}  # the patch and its step on release 1: twice wrong
    assert _counts(evidence) == {"deploy": 2}
    old, old_records, old_log = _plain("p2")
    unpatched = _evidence([old], {"p2": old_records}, old_log)
    unpatched.releases = {1: "2"}  # release 2 reached the patch and skipped it
    assert _counts(unpatched) == {"deploy": 1}
    fresh = _run("f1", "c.fresh", output={"tokens": {"a": "f1-a"}})
    ran = _evidence([fresh], {"f1": [_step("f1", 1, "a", "f1-a")]}, [_exec("f1", "a", 1.0)])
    ran.releases = {1: "1"}
    assert _counts(ran) == {"deploy": 1}


def test_a_step_started_while_its_run_was_seen_paused_breaks_the_pause_invariant() -> None:
    run, records, log = _plain("p1")  # executions start at 1.0, 2.0, 3.0
    window = [
        {"event": "seen-paused", "run": "p1", "t": 1.5},
        {"event": "resume", "run": "p1", "t": 2.5},
    ]
    assert _counts(_evidence([run], {"p1": records}, log, window)) == {"paused": 1}
    in_flight = [  # the step begun before it was seen paused finishes: no offence
        {"event": "seen-paused", "run": "p1", "t": 1.05},
        {"event": "resume", "run": "p1", "t": 1.9},
    ]
    assert _counts(_evidence([run], {"p1": records}, log, in_flight)) == {}


def _fork(source: str, fork_id: str) -> tuple[Run, list[StepRecord]]:
    """A completed fork of ``source`` from seq 2: step a reused, b and c its own."""
    reused = _step(source, 1, "a", f"{source}-a")
    own = [_step(fork_id, i + 2, label, f"{fork_id}-{label}") for i, label in enumerate("bc")]
    records = [StepRecord(fork_id, 1, *_fields(reused)), *own]
    tokens = {"a": f"{source}-a", **{label: f"{fork_id}-{label}" for label in "bc"}}
    run = _run(fork_id, "c.plain", output={"tokens": tokens}, forked_from=(source, 2))
    return run, records


def _fields(record: StepRecord) -> tuple[Any, ...]:
    return (record.name, record.kind, record.status, record.input, record.output)


def test_a_fork_that_runs_a_step_it_reused_breaks_the_fork_invariant() -> None:
    source, records, log = _plain("s1")
    fork, fork_records = _fork("s1", "s1.fork.1")
    own = [_exec("s1.fork.1", label, 5.0 + i) for i, label in enumerate("bc")]
    record = [{"event": "forked", "run": "s1.fork.1", "source": "s1", "workflow": "c.plain"}]
    evidence = _evidence([source, fork], {"s1": records, "s1.fork.1": fork_records},
                         [*log, *own], record)  # fmt: skip
    assert _counts(evidence) == {}
    again = [*log, *own, _exec("s1.fork.1", "a", 9.0)]
    evidence = _evidence([source, fork], {"s1": records, "s1.fork.1": fork_records}, again, record)
    assert _counts(evidence) == {"fork": 1}
    changed = [replace(fork_records[0], output="other"), *fork_records[1:]]
    evidence = _evidence([source, fork], {"s1": records, "s1.fork.1": changed}, log + own, record)
    assert check(evidence).offences["fork"] == ["s1.fork.1 seq 1: not the original's record"]


def test_a_fork_made_before_its_original_settled_the_reused_step_runs_it_itself() -> None:
    # The original's record of a was written after the fork was made (held up by a failover):
    # the fork copied nothing before its point and executed a, recording it after its creation.
    source, records, log = _plain("s1")
    fork, fork_records = _fork("s1", "s1.fork.1")
    mine = {label: f"s1.fork.1-{label}" for label in "abc"}
    own_fork = replace(fork, output={"tokens": mine})
    own_a = replace(_step("s1.fork.1", 1, "a", mine["a"]), finished_at=T0 + timedelta(seconds=1))
    own = [_exec("s1.fork.1", label, 5.0 + i) for i, label in enumerate("abc")]
    record = [{"event": "forked", "run": "s1.fork.1", "source": "s1", "workflow": "c.plain"}]
    runs = {"s1": records, "s1.fork.1": [own_a, *fork_records[1:]]}
    assert _counts(_evidence([source, own_fork], runs, [*log, *own], record)) == {}
    # A record settled by the fork's creation was copied: executing its step again is an offence.
    copied = replace(fork_records[0], finished_at=T0)
    runs = {"s1": records, "s1.fork.1": [copied, *fork_records[1:]]}
    evidence = _evidence([source, fork], runs, [*log, *own], record)
    assert check(evidence).offences["fork"] == ["s1.fork.1: executed step a, reused from s1"]


def test_an_update_answered_twice_or_wrong_breaks_the_update_invariant() -> None:
    token, asked = "d1-a", {"n": 1}
    reply = {"token": token, "payload": asked}

    def desk(*replies: Any) -> Evidence:
        records = [
            StepRecord("d1", 1, "ask", "update", "completed", None, {"id": "u1", "payload": asked}),
            _step("d1", 2, "a", token),
            *(
                StepRecord("d1", 3 + i, "ask", "reply", "completed", {"update": "u1"}, r)
                for i, r in enumerate(replies)
            ),
        ]
        run = _run("d1", "c.desk", output={"tokens": {"a": token}, "asked": asked})
        answered = [{"event": "answered", "run": "d1", "payload": asked, "reply": reply}]
        return _evidence([run], {"d1": records}, [_exec("d1", "a", 1.0)], answered)

    assert check(desk(reply)).offences["update"] == []
    assert len(check(desk(reply, reply)).offences["update"]) == 2  # twice, and not its one reply
    assert len(check(desk({"token": "x", "payload": asked})).offences["update"]) == 2


def test_a_remote_step_dispatched_before_the_pause_may_start_while_paused() -> None:
    token = "r1-r"
    run = _run("r1", "c.remote", "cancelled")
    window = [
        {"event": "cancel", "run": "r1", "t": 30.0},
        {"event": "seen-paused", "run": "r1", "t": 10.0},
        {"event": "resume", "run": "r1", "t": 20.0},
    ]
    late = [_exec("r1", "r", 12.0, kind="remote", token=token)]  # a worker took it late

    def sent(at: float) -> dict[str, list[StepRecord]]:
        record = replace(_step("r1", 1, "r", token), started_at=datetime.fromtimestamp(at, UTC))
        return {"r1": [record]}

    assert _counts(_evidence([run], sent(9.0), late, window)) == {}
    assert _counts(_evidence([run], sent(11.0), late, window)) == {"paused": 1}


def _state(
    runs: dict[str, tuple[str, str | None]],
    records: Sequence[StepRecord] = (),
    crashed_at: float | None = None,
) -> StoreState:
    return StoreState(
        runs=runs,
        records={(r.run_id, r.seq): (r.kind, r.status, r.output) for r in records},
        crashed_at=crashed_at,
    )


def test_what_a_failover_lost_is_sorted_by_what_it_does() -> None:
    _, records, log = _plain("p1")
    crash = _state(
        {"p1": ("completed", "t1"), "gone": ("pending", None), "s1": ("completed", "t1")},
        [*records, _step("s1", 1, "a", "first"), _step("s1", 2, "b", "x")],
        crashed_at=10.0,
    )
    final = _state(
        {"p1": ("completed", "t1"), "s1": ("completed", "t2")},
        [*records, _step("s1", 1, "a", "again"), _step("s1", 2, "b", "x")],
    )
    log += [
        _exec("s1", "a", 1.0, 2.0, token="first"),
        _exec("s1", "b", 3.0, 4.0, token="x"),  # began after a's execution ended: a acknowledged
        _exec("s1", "a", 12.0, token="again"),
    ]
    lost = losses([crash], final, log)
    assert lost.runs == ["gone"]
    assert lost.records == ["s1 #1"]
    assert lost.acknowledged == ["s1 #1"]
    assert lost.settlements == ["s1 (completed at t1, now completed)"]
    assert lost.total == 3
    # A remote workflow checkpoints its turn's local steps together: going on acknowledges none.
    assert losses([crash], final, log, batched={"s1"}).acknowledged == []


def test_an_acknowledged_record_a_failover_lost_breaks_the_forgotten_invariant() -> None:
    run, records, log = _plain("p1")
    evidence = _evidence([run], {"p1": records}, log)
    lost_a = replace(records[0], output="lost")
    evidence.crashes = [_state({"p1": ("running", None)}, [lost_a], crashed_at=10.0)]
    evidence.final = _state({"p1": ("completed", "t1")}, records)
    evidence.executions.append(_exec("p1", "a", 0.5, 0.6, token="lost"))
    assert _counts(evidence) == {"forgotten": 1}  # b began after it: its write had committed
    evidence.crashes = [_state({"p1": ("running", None)}, [lost_a], crashed_at=0.7)]
    assert _counts(evidence) == {}  # the run had not gone on past it: in flight at the crash


def test_the_lane_sweeps_again_over_the_executions_the_store_kept() -> None:
    lane = "s:queue:0"
    runs = _lane_runs("c.queue", "q1", "q2")
    steps = {
        "q1": [replace(_step("q1", 1, "a", "q1-a"), input=["q1", "a", lane])],
        "q2": [replace(_step("q2", 1, "a", "q2-a"), input=["q2", "a", lane])],
    }
    log = [
        # q1's settlement (its step's record with it, and q2's admission) is lost with the old
        # primary after q2 began: q1 resumes and runs its step again, then q2 is admitted again.
        _exec("q1", "a", 1.0, 2.0, lane=lane, token="lost"),
        _exec("q2", "a", 2.5, 3.0, lane=lane, token="admitted by a lost settlement"),
        _exec("q1", "a", 4.0, 5.0, lane=lane),
        _exec("q2", "a", 6.0, 7.0, lane=lane),
    ]
    evidence = _evidence(runs, steps, log)
    evidence.final = _state({})
    findings = check(evidence)
    assert len(findings.offences["overlap"]) == 1
    assert findings.kept is not None
    assert not findings.kept.offences["overlap"]
