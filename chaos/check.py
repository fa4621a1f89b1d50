"""The invariant checker: the store and the side-effect log, held to what runlane promises.

Each invariant counts offences; every count must be zero. A step execution that was in flight
when the injector froze its process (SIGSTOP past the lease) finishes when the process resumes,
after its run may have been recovered elsewhere: no lease can reach into a step that is already
running, so such an execution is left out of the overlap and quota sweeps and reported on its
own. Everything the frozen process does after it resumes is checked: it must start no step of a
run that was taken over meanwhile.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from runlane import Run, RunStatus, StepRecord

from .app import DOOMED, QUOTA_LIMIT
from .config import LEASE

INVARIANTS = {
    "lost": "runs lost: acknowledged (or created by a run) but missing from the store",
    "stuck": "runs stuck: not terminal after the drain deadline",
    "infrastructure_outcome": "runs ending failed or dead with an error not the workload's own",
    "cancelled_unasked": "runs ending cancelled that no cancel or replacing start asked for",
    "checkpoints": "runs whose checkpoints are not exactly 1..N, each once and completed",
    "overlap": "pairs of runs of one singleton key whose bodies overlapped",
    "fifo": "runs of a queue-mode key admitted before an older waiter",
    "quota": "instants at which more runs of a quota key were inside their bodies than its limit",
    "executed_over_twice": "steps executed more than twice",
    "result_twice": "step results applied twice: a record not the result its run consumed",
    "signal": "signals lost or delivered wrong",
    "stale_start": "steps started by a frozen process, after it resumed, for a run taken over",
    "members_died": "engine, worker or producer processes that died or hung on SIGTERM",
}

# Operations (checkpoints) per completed run, by workflow; c.chain's first runs continue after 1.
OPERATIONS = {
    "c.plain": 3,
    "c.sleepy": 3,
    "c.signal": 3,
    "c.remote": 4,
    "c.leaf": 1,
    "c.fan": 4,
    "c.chain": 2,
    "c.queue": 4,
    "c.reject": 4,
    "c.replace": 3,
    "c.quota": 4,
}


@dataclass(frozen=True)
class Execution:
    run: str
    label: str
    pid: int
    kind: str
    lane: str
    start: float
    end: float
    token: str


@dataclass(frozen=True)
class Freeze:
    pid: int
    stopped: float
    resumed: float

    def spans(self, e: Execution) -> bool:
        """Whether the execution was in flight while the process was stopped."""
        return e.pid == self.pid and e.start < self.resumed and e.end > self.stopped


@dataclass
class Evidence:
    runs: dict[str, Run]
    steps: dict[str, list[StepRecord]]
    executions: list[Execution]
    record: list[dict[str, Any]]  # the producer's
    freezes: list[Freeze]
    died: list[tuple[str, int, int]]


@dataclass
class Findings:
    offences: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in INVARIANTS})
    frozen: list[Execution] = field(default_factory=list)  # in flight across a freeze
    frozen_overlaps: list[str] = field(default_factory=list)

    def add(self, invariant: str, what: str) -> None:
        self.offences[invariant].append(what)

    @property
    def failed(self) -> bool:
        return any(self.offences.values())


def read_executions(root: Path) -> list[Execution]:
    executions = []
    for path in sorted(root.glob("effects-*.log")):
        for line in path.read_text().splitlines():
            run, label, pid, kind, lane, start, end, token = line.split()
            executions.append(
                Execution(run, label, int(pid), kind, lane, float(start), float(end), token)
            )
    return executions


def read_record(root: Path) -> list[dict[str, Any]]:
    path = root / "producer.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def check(evidence: Evidence) -> Findings:
    findings = Findings()
    frozen = {id(e) for e in evidence.executions if any(f.spans(e) for f in evidence.freezes)}
    findings.frozen = [e for e in evidence.executions if id(e) in frozen]
    live = [e for e in evidence.executions if id(e) not in frozen]
    _existence(evidence, findings)
    _outcomes(evidence, findings)
    _checkpoints(evidence, findings)
    _lanes(evidence, live, findings)
    _executions(evidence, findings)
    _stale_starts(evidence, findings)
    for name, pid, code in evidence.died:
        findings.add("members_died", f"{name} (pid {pid}) exit code {code}")
    return findings


def started(record: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["run"]: e for e in record if e["event"] == "started"}


def _existence(evidence: Evidence, findings: Findings) -> None:
    runs = evidence.runs
    expected = set(started(evidence.record))
    for run in runs.values():
        continued = run.output.get("continued_as") if isinstance(run.output, dict) else None
        if continued:
            expected.add(continued)
        for record in evidence.steps.get(run.id, []):
            if record.kind == "child" and isinstance(record.input, dict):
                expected.add(str(record.input["child_id"]))
    for run_id in sorted(expected - set(runs)):
        findings.add("lost", run_id)
    for run in runs.values():
        if not run.is_terminal:
            findings.add("stuck", f"{run.id} {run.status}")


def _outcomes(evidence: Evidence, findings: Findings) -> None:
    asked = {e["run"] for e in evidence.record if e["event"] == "cancel"}
    replaced = _replaced(evidence)
    for run in evidence.runs.values():
        if run.status in (RunStatus.FAILED, RunStatus.DEAD) and not _own_failure(run):
            error = run.error or {}
            findings.add(
                "infrastructure_outcome",
                f"{run.id} {run.status}: {error.get('type')}: {str(error.get('message'))[:160]}",
            )
        if run.status == RunStatus.CANCELLED and not (
            run.id in asked or run.id in replaced or _cancelled_parent(run, evidence.runs)
        ):
            findings.add("cancelled_unasked", run.id)
        if run.workflow == "c.doomed" and run.status != RunStatus.FAILED and run.id not in asked:
            findings.add("infrastructure_outcome", f"{run.id} {run.status}: expected to fail")


def _own_failure(run: Run) -> bool:
    error = run.error or {}
    return run.workflow == "c.doomed" and DOOMED in str(error.get("message"))


def _replaced(evidence: Evidence) -> set[str]:
    """Runs of a replace-mode key with a later start of that key (even one the producer gave up
    on: its write may have landed), which cancelled them."""
    lanes: defaultdict[str, list[str]] = defaultdict(list)
    for e in evidence.record:
        if e.get("workflow") == "c.replace" and e["event"] in ("started", "gave-up"):
            lanes[e["input"]["key"]].append(e["run"])
    return {run_id for ids in lanes.values() for run_id in ids[:-1]}


def _cancelled_parent(run: Run, runs: dict[str, Run]) -> bool:
    parent = runs.get(run.parent_id or "")
    return parent is not None and parent.status == RunStatus.CANCELLED


def _checkpoints(evidence: Evidence, findings: Findings) -> None:
    for run in evidence.runs.values():
        records = evidence.steps.get(run.id, [])
        seqs = [r.seq for r in records]
        duplicated = [seq for seq, n in Counter(seqs).items() if n > 1]
        if duplicated:
            findings.add("checkpoints", f"{run.id}: seq {duplicated} recorded more than once")
        if run.status != RunStatus.COMPLETED:
            continue
        continued = isinstance(run.output, dict) and "continued_as" in run.output
        want = 1 if continued else OPERATIONS[run.workflow]
        if sorted(seqs) != list(range(1, want + 1)) or any(
            r.status != "completed" for r in records
        ):
            shown = [(r.seq, r.status) for r in records]
            findings.add("checkpoints", f"{run.id}: {shown}, expected 1..{want} completed")
        _consumed(run, records, evidence, findings)


def _consumed(run: Run, records: list[StepRecord], evidence: Evidence, findings: Findings) -> None:
    """The results a completed run consumed are the ones its records hold, each from a real
    execution of that step; a signal run got the payload the producer sent."""
    tokens = run.output.get("tokens", {}) if isinstance(run.output, dict) else {}
    recorded = {r.input[1]: r.output for r in records if r.kind == "step"}
    executed = {(e.run, e.label, e.token) for e in evidence.executions}
    for label, token in tokens.items():
        if recorded.get(label) != token or (run.id, label, token) not in executed:
            findings.add(
                "result_twice",
                f"{run.id} {label}: consumed {token}, recorded {recorded.get(label)}",
            )
    if run.workflow == "c.signal":
        n = int(run.id.rsplit("-", 1)[1])
        if run.output.get("signal") != {"n": n}:
            findings.add("signal", f"{run.id}: got {run.output.get('signal')}")


def _lanes(evidence: Evidence, live: list[Execution], findings: Findings) -> None:
    bodies: defaultdict[str, dict[str, tuple[float, float]]] = defaultdict(dict)
    for e in live:
        if e.lane == "-":
            continue
        begin, end = bodies[e.lane].get(e.run, (e.start, e.end))
        bodies[e.lane][e.run] = (min(begin, e.start), max(end, e.end))
    for lane, runs in sorted(bodies.items()):
        if lane.startswith("s:"):
            _overlaps(lane, runs, findings)
        if lane.startswith("s:queue:"):
            _fifo(lane, runs, evidence.runs, findings)
        if lane.startswith("c:"):
            _quota(lane, runs, findings)
    for e in findings.frozen:
        runs = bodies.get(e.lane, {})
        others = [r for r, (b, f) in runs.items() if r != e.run and b < e.end and e.start < f]
        if e.lane != "-" and others:
            findings.frozen_overlaps.append(f"{e.run} {e.label} (pid {e.pid}) with {others}")


def _overlaps(lane: str, runs: dict[str, tuple[float, float]], findings: Findings) -> None:
    ordered = sorted((begin, end, run) for run, (begin, end) in runs.items())
    for i, (begin, end, run) in enumerate(ordered):
        for later_begin, _, other in ordered[i + 1 :]:
            if later_begin >= end:
                break
            findings.add("overlap", f"{lane}: {run} [{begin:.3f}, {end:.3f}] and {other}")


def _fifo(
    lane: str, bodies: dict[str, tuple[float, float]], runs: dict[str, Run], findings: Findings
) -> None:
    def created(run_id: str) -> tuple[datetime, str]:
        return runs[run_id].created_at, run_id

    admitted = sorted((run for run in bodies if run in runs), key=lambda r: bodies[r][0])
    for i, run in enumerate(admitted):
        older_later = [r for r in admitted[i + 1 :] if created(r) < created(run)]
        if older_later:
            findings.add("fifo", f"{lane}: {run} admitted before the older {older_later[:3]}")


def _quota(lane: str, runs: dict[str, tuple[float, float]], findings: Findings) -> None:
    # At equal times an end comes before a start: touching bodies are not concurrent.
    events = sorted(
        [(b, 1, r) for r, (b, _) in runs.items()] + [(f, 0, r) for r, (_, f) in runs.items()]
    )
    inside: set[str] = set()
    for at, starts, run in events:
        if not starts:
            inside.discard(run)
            continue
        inside.add(run)
        if len(inside) > QUOTA_LIMIT:
            findings.add("quota", f"{lane} at {at:.3f}: {sorted(inside)}")


def _executions(evidence: Evidence, findings: Findings) -> None:
    counts = Counter((e.run, e.label) for e in evidence.executions)
    for (run, label), n in sorted(counts.items()):
        if n > 2:
            findings.add("executed_over_twice", f"{run} {label}: {n} times")


def _stale_starts(evidence: Evidence, findings: Findings) -> None:
    """A frozen process, once resumed, starts no step that another process executed for the run
    during the freeze (the run was taken over: its turn there must be abandoned, not go on)."""
    done: defaultdict[tuple[str, str], list[Execution]] = defaultdict(list)
    for e in evidence.executions:
        done[(e.run, e.label)].append(e)
    for freeze in evidence.freezes:
        for e in evidence.executions:
            if e.pid != freeze.pid or not freeze.resumed <= e.start <= freeze.resumed + LEASE:
                continue
            before = [
                o
                for o in done[(e.run, e.label)]
                if o.pid != e.pid and freeze.stopped <= o.start and o.end <= e.start
            ]
            if before:
                findings.add(
                    "stale_start",
                    f"{e.run} {e.label} started by pid {e.pid} at {e.start:.3f}, after pid "
                    f"{before[0].pid} executed it at {before[0].start:.3f}",
                )
