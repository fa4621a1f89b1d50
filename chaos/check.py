"""The invariant checker: the store and the side-effect log, held to what runlane promises.

Each invariant counts offences; every count must be zero. A step execution that was in flight
when the injector froze its process (SIGSTOP past the lease) finishes when the process resumes,
after its run may have been recovered elsewhere: no lease can reach into a step that is already
running, so such an execution is left out of the overlap and quota sweeps and reported on its
own. Everything the frozen process does after it resumes is checked: it must start no step of a
run that was taken over meanwhile.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from runlane import Run, RunStatus, StepRecord
from runlane.definitions import RateLimit, as_seconds, workflow_definition
from runlane.step_queues import StepQueue, window_start

from .app import DEBOUNCED, DOOMED, LIMITED, QUEUES, QUOTA_LIMIT, REMOTE_BODIES, THROTTLED
from .config import LEASE
from .failover import Losses, StoreState, losses
from .workload import SIGNALLED

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
    "queue_concurrency": "instants at which more recorded attempts of a step queue were "
    "executing than its concurrency",
    "queue_rate": "fixed windows in which a step queue admitted more steps than its rate limit",
    "rate_limit": "sliding windows in which a rate-limited key created more runs than its limit",
    "throttle": "throttled runs counted faster than their limit, out of start order, or begun "
    "before their instant",
    "debounce": "debounced runs begun early, a key with two runs not begun at once, a start "
    "folded into a begun run, or a run without its last start's input",
    "members_died": "engine, worker or producer processes that died or hung on SIGTERM",
    "deploy": "runs run by code that did not have them: a patched branch taken or skipped "
    "against the code that reached the patch, a release-2 workflow or version executed by "
    "release 1",
    "paused": "steps a run started while it was paused (seen paused, its resume not asked yet)",
    "fork": "forks that executed a step they reused, or whose reused records are not the "
    "original's",
    "update": "updates answered twice, a reply not the one stored, or a run of c.desk without "
    "its one reply",
    "forgotten": "step records a failover lost though their run had gone on past them: "
    "acknowledged commits the promoted standby never had",
}

REMOTE_WORKFLOWS = {workflow_definition(body).name for body in REMOTE_BODIES.values()}
"""Workflows whose turns a worker decides: their local steps are checkpointed together."""

PAUSE_SLACK = 5.0
"""Seconds after an older waiter's resume within which a run's body may begin and still have
been admitted while that waiter was paused (the turn after an admission is late under faults)."""

# Operations (checkpoints) per completed run, by workflow; c.chain's first runs continue after 1.
OPERATIONS = {
    "c.plain": 3,
    "c.sleepy": 3,
    "c.signal": 3,
    "c.remote": 4,
    "c.rwf": 6,
    "c.leaf": 1,
    "c.fresh": 1,
    "c.fan": 4,
    "c.chain": 2,
    "c.queue": 4,
    "c.reject": 4,
    "c.replace": 3,
    "c.quota": 4,
    "c.stepq": 4,
    "c.metered": 3,
    "c.limited": 1,
    "c.throttled": 1,
    "c.debounced": 1,
    "c.desk": 3,
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


@dataclass(frozen=True)
class QueueAdmission:
    """A step queue's admission, as its store row recorded it (``admitted_at`` is the instant
    the admission counted at in the queue's rate window)."""

    queue: str
    run: str
    seq: int
    at: datetime


@dataclass(frozen=True)
class QueueEntry:
    """A step's entry in a step queue when the fleet stopped: waiting, or holding a slot."""

    queue: str
    run: str
    seq: int
    holds: bool


@dataclass
class Evidence:
    runs: dict[str, Run]
    steps: dict[str, list[StepRecord]]
    executions: list[Execution]
    record: list[dict[str, Any]]  # the producer's
    freezes: list[Freeze]
    died: list[tuple[str, int, int]]
    admissions: list[QueueAdmission] = field(default_factory=list)  # every step queue's
    entries: list[QueueEntry] = field(default_factory=list)  # left when the fleet stopped
    releases: dict[int, str] = field(default_factory=dict)  # each member process's code
    crashes: list[StoreState] = field(default_factory=list)  # each failover's old primary
    final: StoreState | None = None  # the store in the end, read as the old primaries are


@dataclass
class Findings:
    offences: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in INVARIANTS})
    frozen: list[Execution] = field(default_factory=list)  # in flight across a freeze
    frozen_overlaps: list[str] = field(default_factory=list)
    # Executions in a step queue whose result is not the one its step recorded (a duplicate, a
    # timed-out attempt's late execution, a turn that lost its lease): no slot covers them.
    unrecorded: list[Execution] = field(default_factory=list)
    losses: Losses = field(default_factory=Losses)  # what the failovers lost
    kept: Findings | None = None  # the lane sweeps over the executions the store kept

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
    _step_queues(evidence, live, findings)
    _queue_rates(evidence, findings)
    _rate_limits(evidence, findings)
    _throttles(evidence, findings)
    _debounces(evidence, findings)
    _deploys(evidence, findings)
    _pauses(evidence, findings)
    _forks(evidence, findings)
    _updates(evidence, findings)
    if evidence.final is not None:
        _failovers(evidence, live, findings)
    for name, pid, code in evidence.died:
        findings.add("members_died", f"{name} (pid {pid}) exit code {code}")
    return findings


def _failovers(evidence: Evidence, live: list[Execution], findings: Findings) -> None:
    """What the failovers lost (an acknowledged step record lost is an offence), and the lane
    sweeps again over the executions whose results the store kept as their steps' records:
    the history the store knows. An execution made under a commit a failover lost (the next
    holder a lost settlement admitted, a step whose record was lost) is in no record."""
    assert evidence.final is not None
    batched = {r.id for r in evidence.runs.values() if r.workflow in REMOTE_WORKFLOWS}
    findings.losses = losses(evidence.crashes, evidence.final, evidence.executions, batched)
    for what in findings.losses.acknowledged:
        findings.add("forgotten", what)
    recorded = _recorded(evidence)
    kept = [e for e in live if recorded.get((e.run, e.label)) == e.token]
    findings.kept = Findings()
    _lanes(evidence, kept, findings.kept)


def started(record: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["run"]: e for e in record if e["event"] == "started"}


def _existence(evidence: Evidence, findings: Findings) -> None:
    runs = evidence.runs
    expected = set(started(evidence.record))
    expected |= {e["run"] for e in evidence.record if e["event"] == "forked"}
    for run in runs.values():
        continued = run.output.get("continued_as") if isinstance(run.output, dict) else None
        if continued:
            expected.add(continued)
        for record in evidence.steps.get(run.id, []):
            if record.kind in ("child", "start_child") and isinstance(record.input, dict):
                expected.add(str(record.input["child_id"]))
    for run_id in sorted(expected - set(runs)):
        findings.add("lost", run_id)
    for run in runs.values():
        if not run.is_terminal:
            findings.add("stuck", _waiting(run, evidence))


def _waiting(run: Run, evidence: Evidence) -> str:
    """A stuck run and what it waits on, for a failure the next reader can diagnose from the
    console alone: its wake time and lease, its steps' states, and its step queue entries."""
    steps = " ".join(f"{s.seq}:{s.status}" for s in evidence.steps.get(run.id, []))
    entries = " ".join(
        f"{e.queue}#{e.seq}:{'holds' if e.holds else 'waits'}"
        for e in evidence.entries
        if e.run == run.id
    )
    wake = run.wake_at.isoformat(timespec="seconds") if run.wake_at else None
    return (
        f"{run.id} {run.status} wake_at={wake} lease={run.lease_owner}"
        f" steps=[{steps}] entries=[{entries}]"
    )


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
            run.id in asked or run.id in replaced or _cancelled_ancestor(run, evidence.runs)
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


def _cancelled_ancestor(run: Run, runs: dict[str, Run]) -> bool:
    """Whether a cancellation of an ancestor reached ``run``: a cancel reaches every active
    descendant that is not detached (nor below a detached one), through children that ended."""
    while not run.detached:
        parent = runs.get(run.parent_id or "")
        if parent is None:
            return False
        if parent.status == RunStatus.CANCELLED:
            return True
        run = parent
    return False


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
        want = 1 if continued else operations(run, records)
        if sorted(seqs) != list(range(1, want + 1)) or any(
            r.status != "completed" for r in records
        ):
            shown = [(r.seq, r.status) for r in records]
            findings.add("checkpoints", f"{run.id}: {shown}, expected 1..{want} completed")
        _consumed(run, records, evidence, findings)


def operations(run: Run, records: list[StepRecord]) -> int:
    """The checkpoints of a completed run: its workflow's, and release 2's additions (a patch
    marker and its step; the child a version 2 leaf starts)."""
    patched = 2 if any(r.kind == "patch" for r in records) else 0
    started_child = 1 if (run.workflow, run.version) == ("c.leaf", "2") else 0
    return OPERATIONS[run.workflow] + patched + started_child


def _deploys(evidence: Evidence, findings: Findings) -> None:
    """Each run ran on code that has it. The patched step ``p`` ran on release 2 only; a
    ``c.plain`` run (its patch comes before any step) is patched exactly when the process that
    ran its first step was on release 2; a workflow or version only release 2 has ran on
    release 2 only."""
    releases = evidence.releases
    first: dict[str, Execution] = {}
    ran_on: defaultdict[str, set[str]] = defaultdict(set)
    for e in sorted(evidence.executions, key=lambda e: e.start):
        first.setdefault(e.run, e)
        ran_on[e.run].add(releases.get(e.pid, "?"))
        if e.label == "p" and releases.get(e.pid) != "2":
            findings.add("deploy", f"{e.run}: its patched step ran on release 1 (pid {e.pid})")
    for run in evidence.runs.values():
        opener = first.get(run.id)
        # A fork reuses its original's first step (and patch marker): the fork check's.
        forked = run.forked_from is not None
        if run.workflow == "c.plain" and opener is not None and run.is_terminal and not forked:
            marked = any(r.kind == "patch" for r in evidence.steps.get(run.id, []))
            if marked != (releases.get(opener.pid) == "2"):
                shown = "patched" if marked else "not patched"
                findings.add("deploy", f"{run.id}: {shown}, first step by pid {opener.pid}")
        if (run.workflow == "c.fresh" or run.version == "2") and ran_on[run.id] - {"2"}:
            findings.add("deploy", f"{run.id} ({run.workflow}@{run.version}): ran on release 1")


def _pauses(evidence: Evidence, findings: Findings) -> None:
    """A run seen paused starts no step until its resume is asked (a step in flight when the
    pause came finishes; a frozen process's late steps are the stale-start check's). A remote
    step starts when its run dispatches it: a worker may take a task sent before the pause
    later, so a remote execution is judged by its record's dispatch (``started_at``)."""
    dispatched = {
        (run_id, str(r.input[1])): r.started_at.timestamp()
        for run_id, records in evidence.steps.items()
        for r in records
        if r.kind == "step" and isinstance(r.input, list) and r.started_at is not None
    }
    seen: dict[str, float] = {}
    windows: list[tuple[str, float, float]] = []
    for event in evidence.record:
        if event["event"] == "seen-paused":
            seen[event["run"]] = event["t"]
        elif event["event"] in ("resume", "gave-up") and event["run"] in seen:
            windows.append((event["run"], seen.pop(event["run"]), event["t"]))
    windows.extend((run, t, float("inf")) for run, t in seen.items())
    frozen = {id(e) for e in evidence.executions for f in evidence.freezes if f.spans(e)}
    for run, begin, end in windows:
        for e in evidence.executions:
            remote = e.kind in ("remote", "remote_t")
            began = dispatched.get((e.run, e.label), e.start) if remote else e.start
            if e.run == run and begin < began < end and id(e) not in frozen:
                findings.add(
                    "paused",
                    f"{run}: step {e.label} started {e.start - begin:.3f}s "
                    f"after it was seen paused (pid {e.pid})",
                )


def _forks(evidence: Evidence, findings: Findings) -> None:
    """A fork runs none of the steps it reused, and reuses the original's records as they are.
    It reuses the records before its point that the original had settled when it was made: one
    the original settled later (its write held up by an outage) the fork executes itself, and
    that record finished after the fork was created."""
    for run in evidence.runs.values():
        if run.forked_from is None:
            continue
        source, point = run.forked_from
        original = {r.seq: r for r in evidence.steps.get(source, [])}
        made = run.created_at
        steps = evidence.steps.get(run.id, [])
        # Settled by the fork's creation (a record without a finish time counts as settled).
        reused = [r for r in steps if r.seq < point and (r.finished_at or made) <= made]
        for record in reused:
            was = original.get(record.seq)
            if was is None or (was.kind, was.name, was.output) != (
                record.kind,
                record.name,
                record.output,
            ):
                findings.add("fork", f"{run.id} seq {record.seq}: not the original's record")
        labels = {str(r.input[1]) for r in reused if r.kind == "step" and isinstance(r.input, list)}
        for e in evidence.executions:
            if e.run == run.id and e.label in labels:
                findings.add("fork", f"{run.id}: executed step {e.label}, reused from {source}")


def _updates(evidence: Evidence, findings: Findings) -> None:
    """Each update is answered at most once; a completed c.desk run has its one reply, made of
    its step's token and its update's payload; what the producer was answered is that reply."""
    answered = {e["run"]: e["reply"] for e in evidence.record if e["event"] == "answered"}
    for run in evidence.runs.values():
        if run.workflow != "c.desk":
            continue
        records = evidence.steps.get(run.id, [])
        replies = [r for r in records if r.kind == "reply"]
        per_update = Counter(str((r.input or {}).get("update")) for r in replies)
        for update, n in per_update.items():
            if n > 1:
                findings.add("update", f"{run.id}: update {update} answered {n} times")
        if run.status == RunStatus.COMPLETED:
            step = next((r for r in records if r.kind == "step"), None)
            want = {"token": step.output if step else None, "payload": run.output.get("asked")}
            if [r.output for r in replies] != [want]:
                findings.add("update", f"{run.id}: replies {[r.output for r in replies]}")
        stored = next((r.output for r in replies if r.status == "completed"), None)
        if run.id in answered and answered[run.id] != stored:
            findings.add("update", f"{run.id}: answered {answered[run.id]}, stored {stored}")


def _consumed(run: Run, records: list[StepRecord], evidence: Evidence, findings: Findings) -> None:
    """The results a completed run consumed are the ones its records hold, each from a real
    execution of that step; a signal run got the payload the producer sent."""
    tokens = run.output.get("tokens", {}) if isinstance(run.output, dict) else {}
    recorded = {r.input[1]: r.output for r in records if r.kind == "step"}
    # The run a step executed for: its own, or for a record a fork reused, the original.
    owner = {r.input[1]: r.input[0] for r in records if r.kind == "step"}
    executed = {(e.run, e.label, e.token) for e in evidence.executions}
    for label, token in tokens.items():
        if recorded.get(label) != token or (owner.get(label), label, token) not in executed:
            findings.add(
                "result_twice",
                f"{run.id} {label}: consumed {token}, recorded {recorded.get(label)}",
            )
    if run.workflow in SIGNALLED:
        n = int(run.id.rsplit("-", 1)[1])
        if run.output.get("signal") != {"n": n}:
            findings.add("signal", f"{run.id}: got {run.output.get('signal')}")


def _lanes(evidence: Evidence, live: list[Execution], findings: Findings) -> None:
    bodies: defaultdict[str, dict[str, tuple[float, float]]] = defaultdict(dict)
    for e in live:
        if e.lane == "-" or e.lane.startswith("q:"):
            continue
        begin, end = bodies[e.lane].get(e.run, (e.start, e.end))
        bodies[e.lane][e.run] = (min(begin, e.start), max(end, e.end))
    for lane, runs in sorted(bodies.items()):
        if lane.startswith("s:"):
            _overlaps(lane, runs, findings)
        if lane.startswith("s:queue:"):
            _fifo(lane, runs, evidence, findings)
        if lane.startswith("c:"):
            _quota(lane, runs, findings)
    for e in findings.frozen:
        runs = bodies.get(e.lane, {})
        others = [r for r, (b, f) in runs.items() if r != e.run and b < e.end and e.start < f]
        if e.lane != "-" and not e.lane.startswith("q:") and others:
            findings.frozen_overlaps.append(f"{e.run} {e.label} (pid {e.pid}) with {others}")


def _overlaps(lane: str, runs: dict[str, tuple[float, float]], findings: Findings) -> None:
    ordered = sorted((begin, end, run) for run, (begin, end) in runs.items())
    for i, (begin, end, run) in enumerate(ordered):
        for later_begin, _, other in ordered[i + 1 :]:
            if later_begin >= end:
                break
            findings.add("overlap", f"{lane}: {run} [{begin:.3f}, {end:.3f}] and {other}")


def _fifo(
    lane: str, bodies: dict[str, tuple[float, float]], evidence: Evidence, findings: Findings
) -> None:
    """Runs of a queue-mode key are admitted in creation order, except past a paused waiter: a
    paused run waits in no line, so a run admitted while an older one was paused has not jumped
    it (its body may begin up to ``PAUSE_SLACK`` after that resume: it was admitted before)."""
    runs = evidence.runs
    paused = _pause_windows(evidence.record)

    def created(run_id: str) -> tuple[datetime, str]:
        return runs[run_id].created_at, run_id

    def passed_while_paused(run: str, older: str) -> bool:
        begin = bodies[run][0]
        return any(b <= begin <= e + PAUSE_SLACK for b, e in paused.get(older, ()))

    admitted = sorted((run for run in bodies if run in runs), key=lambda r: bodies[r][0])
    for i, run in enumerate(admitted):
        older_later = [
            r
            for r in admitted[i + 1 :]
            if created(r) < created(run) and not passed_while_paused(run, r)
        ]
        if older_later:
            findings.add("fifo", f"{lane}: {run} admitted before the older {older_later[:3]}")


def _pause_windows(record: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """Each run's pauses, from the pause asked (when it paused) to its resume answered (or
    forever, when the producer gave the resume up)."""
    asked: dict[str, float] = {}
    windows: defaultdict[str, list[tuple[float, float]]] = defaultdict(list)
    for event in record:
        run = str(event.get("run"))
        if event["event"] == "pause":
            asked[run] = event["t"]
        elif event["event"] == "paused" and not event.get("result"):
            asked.pop(run, None)
        elif event["event"] in ("resumed", "gave-up") and run in asked:
            end = event["t"] if event["event"] == "resumed" else float("inf")
            windows[run].append((asked.pop(run), end))
    for run, begin in asked.items():
        windows[run].append((begin, float("inf")))
    return windows


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
    records = {
        (run_id, str(r.input[1])): r
        for run_id, rs in evidence.steps.items()
        for r in rs
        if r.kind == "step" and isinstance(r.input, list) and len(r.input) == 3
    }
    for (run, label), n in sorted(counts.items()):
        if n > 2:
            # What the store says of it, to tell a recovery's or a re-send's execution apart.
            found = evidence.runs.get(run)
            record = records.get((run, label))
            detail = (
                f"; the run recovered {found.recoveries if found else '?'} times, the step's "
                f"attempts {record.attempts if record else '?'}, sent "
                f"{record.dispatches if record else '?'} times"
            )
            pids = sorted({e.pid for e in evidence.executions if (e.run, e.label) == (run, label)})
            findings.add("executed_over_twice", f"{run} {label}: {n} times by {pids}{detail}")


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


def _recorded(evidence: Evidence) -> dict[tuple[str, str], Any]:
    """Each step's recorded result, by run and label."""
    return {
        (run_id, str(r.input[1])): r.output
        for run_id, records in evidence.steps.items()
        for r in records
        if r.kind == "step" and isinstance(r.input, list) and len(r.input) == 3
    }


def _step_queues(evidence: Evidence, live: list[Execution], findings: Findings) -> None:
    """A step queue never has more attempts executing than its concurrency.

    A slot is held from the admission of an attempt until the attempt is recorded (or its run
    settles, or is recovered after its lease expired: the lost turn's slots are given back, a
    remote attempt's in flight aside).
    So the execution whose result its step recorded ran entirely inside its slot; the others
    (a duplicate of a remote task, a timed-out attempt a worker got late, a turn fenced after
    its lease expired, a process frozen mid-step) are at-least-once re-executions no slot
    covers, counted apart. At every instant, the distinct steps with a recorded execution in
    flight must be at most the queue's concurrency (an end before a start at equal times)."""
    recorded = _recorded(evidence)
    unfrozen = {id(e) for e in live}
    for name, queue in sorted(QUEUES.items()):
        lane = f"q:{name}"
        held: list[Execution] = []
        spare: list[Execution] = []
        for e in evidence.executions:
            if e.lane == lane:
                covered = recorded.get((e.run, e.label)) == e.token and id(e) in unfrozen
                (held if covered else spare).append(e)
        findings.unrecorded += spare
        if queue.concurrency is None:
            continue
        events = sorted(
            [(e.start, 1, e.run, e.label) for e in held]
            + [(e.end, 0, e.run, e.label) for e in held]
        )
        inside: set[tuple[str, str]] = set()
        for at, starts, run, label in events:
            if not starts:
                inside.discard((run, label))
                continue
            inside.add((run, label))
            if len(inside) > queue.concurrency:
                shown = sorted(f"{r}/{x}" for r, x in inside)
                findings.add("queue_concurrency", f"{lane} at {at:.3f}: {shown}")


def _queue_rates(evidence: Evidence, findings: Findings) -> None:
    """A rate-limited step queue admits at most ``limit`` steps per fixed window (windows
    aligned on the epoch), counting every admission the store made, a re-admission after a
    lost turn included."""
    windows: Counter[tuple[str, datetime]] = Counter()
    for a in evidence.admissions:
        queue: StepQueue | None = QUEUES.get(a.queue)
        if queue is None or queue.rate_limit is None:
            continue
        windows[(a.queue, window_start(a.at, as_seconds(queue.rate_limit.period)))] += 1
    for (name, start), n in sorted(windows.items()):
        rate = QUEUES[name].rate_limit
        assert rate is not None
        if n > rate.limit:
            findings.add("queue_rate", f"{name}: {n} admissions in the window at {start}")


def _by_key(evidence: Evidence, workflow: str, field_name: str) -> dict[str, list[Run]]:
    keyed: defaultdict[str, list[Run]] = defaultdict(list)
    for run in evidence.runs.values():
        if run.workflow == workflow:
            keyed[str(getattr(run, field_name))].append(run)
    return keyed


def _crowded(at: list[datetime], rule: RateLimit) -> list[tuple[datetime, datetime]]:
    """The windows of ``rule.period`` that hold more than ``rule.limit`` of the instants (sorted):
    each as its first and last instant."""
    period = timedelta(seconds=as_seconds(rule.period))
    return [
        (at[i], at[i + rule.limit])
        for i in range(len(at) - rule.limit)
        if at[i + rule.limit] - at[i] < period
    ]


def _first_starts(evidence: Evidence) -> dict[str, float]:
    first: dict[str, float] = {}
    for e in evidence.executions:
        first[e.run] = min(first.get(e.run, e.start), e.start)
    return first


def _rate_limits(evidence: Evidence, findings: Findings) -> None:
    """Created runs of a rate-limited key: at most ``limit`` in any sliding window of
    ``period``, at the instant each start counted (every created run counts, whatever its end)."""
    for key, runs in sorted(_by_key(evidence, "c.limited", "rate_key").items()):
        unmeasured = [r.id for r in runs if r.rate_at is None]
        if unmeasured:
            findings.add("rate_limit", f"{key}: runs without the instant they counted at")
        at = sorted(r.rate_at for r in runs if r.rate_at is not None)
        for first, last in _crowded(at, LIMITED):
            findings.add("rate_limit", f"{key}: {LIMITED.limit + 1} runs in [{first}, {last}]")


def _throttles(evidence: Evidence, findings: Findings) -> None:
    """Throttled runs of a key: the instants they were given hold at most ``limit`` in any
    sliding window of ``period``, in the order the runs were created, and no run executed a
    step before its instant."""
    first = _first_starts(evidence)
    for key, runs in sorted(_by_key(evidence, "c.throttled", "rate_key").items()):
        if any(r.rate_at is None for r in runs):
            findings.add("throttle", f"{key}: runs without the instant they begin at")
            continue
        runs.sort(key=lambda r: (r.created_at, r.id))
        at = [r.rate_at for r in runs if r.rate_at is not None]
        if at != sorted(at):
            findings.add("throttle", f"{key}: instants out of start order")
        for begin, end in _crowded(sorted(at), THROTTLED):
            findings.add("throttle", f"{key}: {THROTTLED.limit + 1} begin in [{begin}, {end}]")
        for run in runs:
            began = first.get(run.id)
            if began is not None and run.rate_at is not None and began < run.rate_at.timestamp():
                findings.add("throttle", f"{run.id} began at {began:.3f}, before {run.rate_at}")


def _debounces(evidence: Evidence, findings: Findings) -> None:
    """Debounced runs of a key: while held (from its creation to its ``begin_at``), a run is
    the key's only one not begun, so a later start made no other; no run executed before its
    ``begin_at``; every start folded into a run came before it began; the run ran with the
    input of the last start that folded into it (unless a start whose answer was lost landed)."""
    first = _first_starts(evidence)
    period = timedelta(seconds=as_seconds(DEBOUNCED.period))
    for key, runs in sorted(_by_key(evidence, "c.debounced", "debounce_key").items()):
        runs.sort(key=lambda r: (r.created_at, r.id))
        for run, later in itertools.pairwise(runs):
            begin = run.begin_at or run.created_at + period
            if later.created_at < begin:
                findings.add("debounce", f"{key}: {later.id} created while {run.id} was held")
        for run in runs:
            began = first.get(run.id)
            if run.begin_at is None:
                findings.add("debounce", f"{run.id}: no instant it began at")
            elif began is not None and began < run.begin_at.timestamp():
                findings.add("debounce", f"{run.id} ran at {began:.3f}, before {run.begin_at}")
    lost_answers = {
        e["input"]["key"]
        for e in evidence.record
        if e.get("workflow") == "c.debounced" and e["event"] == "gave-up"
    }
    last: dict[str, dict[str, Any]] = {}
    for e in evidence.record:
        if e.get("workflow") != "c.debounced" or e["event"] not in ("started", "folded"):
            continue
        last[e["run"]] = e
        held = evidence.runs.get(e["run"])
        begun = None if held is None else held.begin_at
        if e["event"] == "folded" and begun is not None and begun.timestamp() <= e["asked"]:
            findings.add("debounce", f"{e['requested']} folded into {e['run']}, begun before")
    for run_id, e in last.items():
        ran = evidence.runs.get(run_id)
        if ran is None or "input" not in e or e["input"]["key"] in lost_answers:
            continue
        seen = ran.output.get("seen") if isinstance(ran.output, dict) else None
        if ran.input != e["input"] or (ran.status == RunStatus.COMPLETED and seen != e["input"]):
            findings.add("debounce", f"{run_id} ran with {ran.input}, the last start {e['input']}")
