"""The figures of a chaos run, as the markdown of RELIABILITY.md (or a report elsewhere)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any

from runlane import StepRecord

from .check import INVARIANTS, Evidence, Findings, started
from .config import LEASE
from .faults import DELAY, DOWN, DROP, FAILOVER, FREEZE, Injector

TEMPLATE = Path(__file__).with_name("reliability.md")


@dataclass(frozen=True)
class Run:
    """How the run went, besides the evidence: its seed, budget and timings."""

    seed: int
    seconds: float
    drained_in: float | None  # seconds from the end of the budget to every run terminal
    wall: float  # seconds for the whole run, servers included
    when: str  # UTC date and time of the start
    standby: str = ""  # "sync" or "async": the database had a standby (see CHAOS_STANDBY)


def render(run: Run, evidence: Evidence, findings: Findings, injector: Injector) -> str:
    figures = "\n\n".join(
        [
            _summary(run, evidence, findings),
            _workload(evidence),
            _faults(injector),
            *([_failovers(run, evidence, findings, injector)] if run.standby else []),
            _invariants(findings),
        ]
    )
    return Template(TEMPLATE.read_text()).substitute(figures=figures)


def _summary(run: Run, evidence: Evidence, findings: Findings) -> str:
    drained = f"{run.drained_in:.1f} s" if run.drained_in is not None else "not within the deadline"
    executions = evidence.executions
    twice = sum(1 for n in Counter((e.run, e.label) for e in executions).values() if n == 2)
    verdict = "**failed**" if findings.failed else "passed: every invariant at zero"
    replication = {"sync": "a synchronous", "async": "an asynchronous"}.get(run.standby)
    topology = f" The database: a primary and {replication} standby." if replication else ""
    recovered = [r for r in evidence.runs.values() if r.recoveries]
    records = [s for steps in evidence.steps.values() for s in steps if s.kind == "step"]
    retried = sum(1 for s in records if s.attempts > 1)
    resent = sum(1 for s in records if s.dispatches > 1)
    folded = sum(1 for e in evidence.record if e["event"] == "folded")
    return "\n".join(
        [
            f"Seed **{run.seed}**, {run.seconds:.0f} s of faults, started {run.when} UTC; every run "
            f"terminal {drained} after the faults stopped; {run.wall:.0f} s in all. "
            f"Verdict: {verdict}.{topology}",
            "",
            f"- {len(started(evidence.record))} runs started and acknowledged by the producer, "
            f"{len(evidence.runs)} runs in the store in the end (children and continuations "
            "included).",
            f"- {len(executions)} step executions logged; {twice} steps executed twice (the step "
            "in flight at a fault); "
            f"{len(findings.frozen)} executions were in flight while their process was frozen, "
            f"{len(findings.frozen_overlaps)} of them overlapping another run of their key "
            "(see below).",
            f"- {len(recovered)} runs recovered after their lease expired "
            f"({sum(r.recoveries for r in recovered)} recoveries); {retried} steps needed more "
            f"than one attempt; {resent} remote attempts were sent again (no worker took them, "
            "or their result was lost).",
            f"- {len(evidence.admissions)} step queue admissions; "
            f"{len(findings.unrecorded)} executions in a step queue were not the ones their "
            "step recorded (a duplicate remote task, a timed-out attempt executed late, a turn "
            "fenced after its lease expired: no slot covers them, so the concurrency sweep "
            f"leaves them out); {folded} starts folded into a debounced run.",
        ]
    )


def _workload(evidence: Evidence) -> str:
    events = Counter((e.get("workflow", ""), e["event"]) for e in evidence.record)
    refused = Counter(
        (e["workflow"], e["error"]) for e in evidence.record if e["event"] == "refused"
    )
    workflow_of = {run_id: e["workflow"] for run_id, e in started(evidence.record).items()}
    asked = Counter(workflow_of[e["run"]] for e in evidence.record if e["event"] == "cancel")
    statuses = Counter((r.workflow, str(r.status)) for r in evidence.runs.values())
    workflows = sorted({r.workflow for r in evidence.runs.values()} | {w for w, _ in events if w})
    rows = [
        "| workflow | started | refused | cancels asked | completed | failed | cancelled | other |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for w in workflows:
        refusals = ", ".join(f"{n} {error}" for (wf, error), n in refused.items() if wf == w)
        done = {s: statuses[(w, s)] for s in ("completed", "failed", "cancelled")}
        other = sum(n for (wf, s), n in statuses.items() if wf == w and s not in done)
        rows.append(
            f"| `{w}` | {events[(w, 'started')]} | {refusals or 0} | {asked[w]} | "
            f"{done['completed']} | {done['failed']} | {done['cancelled']} | {other} |"
        )
    gave_up = sum(1 for e in evidence.record if e["event"] == "gave-up")
    said = Counter(e["event"] for e in evidence.record)
    paused = sum(1 for e in evidence.record if e["event"] == "paused" and e["result"])
    return "\n".join(
        [
            "### Workload",
            "",
            *rows,
            "",
            f"{said['signalled']} signals sent; {paused} runs paused ({said['seen-paused']} seen"
            f" paused before their resume), {said['resumed']} resumed; {said['forked']} forks;"
            f" {said['answered']} updates answered; {gave_up} producer calls given up after 90 s"
            " of outage. `c.leaf` runs are the fans' children; `c.chain` counts continuations.",
        ]
    )


def _faults(injector: Injector) -> str:
    detail = {
        "terminate-backends": f"{injector.terminated} backends terminated",
        "freeze-engine": f"SIGSTOP for {FREEZE:.0f} s (lease {LEASE:.0f} s), then SIGCONT",
        "freeze-worker": f"SIGSTOP for {FREEZE:.0f} s (turn silence {LEASE:.0f} s), then SIGCONT",
        "restart-redis": f"down for {DOWN:.0f} s, every key lost",
        "restart-postgres": f"stopped as in a crash (immediate), down for {DOWN:.0f} s",
        "delay-transport": f"every Redis message held {DELAY:.0f} s, then delivered",
        "drop-transport": f"every Redis message of {DROP:.0f} s dropped, connections reset",
        "deploy": "a member stopped (SIGTERM, it drains) and started on release 2: a patched "
        "`c.plain` and `c.rwf`, a version 2 of `c.leaf`, a workflow `c.fresh` of its own",
        FAILOVER: "the primary stopped as in a crash, the standby promoted, a new standby made "
        "from it"
        + (f" (the standby cut off {injector.lag:.1f} s before the crash)" if injector.lag else ""),
    }
    rows = ["| fault | injected | |", "|---|---|---|"]
    rows += [
        f"| {kind} | {injector.counts[kind]} | {detail.get(kind, '')} |" for kind in injector.kinds
    ]
    total = sum(injector.counts.values())
    return "\n".join(["### Faults", "", *rows, f"| **all** | **{total}** | |"])


def _failovers(run: Run, evidence: Evidence, findings: Findings, injector: Injector) -> str:
    """What the failovers cost: how long each took, and what the old primaries had committed
    that the store lost (their data read as the crash left it)."""
    lost = findings.losses
    promoted = [p for p, _ in injector.switches]
    rebuilt = [r for _, r in injector.switches]
    executions = Counter((e.run, e.label) for e in evidence.executions)
    labels = {(r.run_id, r.seq): r.input[1] for s in evidence.steps.values() for r in s if _own(r)}
    again = sum(1 for what in lost.records if executions[_label(what, labels)] > 1)
    timing = (
        f"{len(promoted)} failovers ({run.standby} replication): the standby promoted "
        f"{_spread(promoted)} s after the crash, and a new standby streaming "
        f"{_spread(rebuilt)} s after the crash."
        if promoted
        else f"No failover ({run.standby} replication)."
    )
    rows = [
        "| what the old primaries had and the store lost | count |",
        "|---|---|",
        f"| runs (starts; the acknowledged ones count as runs lost) | {len(lost.runs)} |",
        f"| step records (a checkpoint lost: the step runs again; {again} did) | "
        f"{len(lost.records)} |",
        f"| of which acknowledged (the run went on past them before the crash) | "
        f"{len(lost.acknowledged)} |",
        f"| settlements (the run resumed from its last checkpoint) | {len(lost.settlements)} |",
        f"| other records (sleeps, signal and update waits, replies, children) | "
        f"{len(lost.other)} |",
    ]
    kept = findings.kept or Findings()
    sweeps = {k: len(kept.offences[k]) for k in ("overlap", "fifo", "quota")}
    history = (
        "Over only the executions whose results the store kept as their steps' records (the "
        f"history it knows): {sweeps['overlap']} overlapping pairs of a singleton key's runs, "
        f"{sweeps['fifo']} runs admitted before an older waiter, {sweeps['quota']} instants "
        "over a quota."
    )
    return "\n".join(["### Failovers", "", timing, "", *rows, "", history])


def _own(record: StepRecord) -> bool:
    return record.kind == "step" and isinstance(record.input, list) and len(record.input) == 3


def _label(what: str, labels: dict[tuple[str, int], Any]) -> tuple[str, str]:
    """A lost record's ``"<run> #<seq>"`` as the side-effect log names its step."""
    run_id, seq = what.split(" #")
    return run_id, str(labels.get((run_id, int(seq)), ""))


def _spread(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:.1f}" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f} to {high:.1f}"


def _invariants(findings: Findings) -> str:
    rows = ["| invariant | count |", "|---|---|"]
    rows += [f"| {text} | {len(findings.offences[k])} |" for k, text in INVARIANTS.items()]
    return "\n".join(["### Invariants", "", *rows])


def offenders(findings: Findings, most: int = 10) -> str:
    """The offending runs of each broken invariant, for the console."""
    lines = []
    for key, found in findings.offences.items():
        if found:
            lines.append(f"{key}: {len(found)} ({INVARIANTS[key]})")
            lines += [f"  {what}" for what in found[:most]]
    return "\n".join(lines)
