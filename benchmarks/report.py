"""Render BENCHMARKS.md from the JSON lines of one harness run.

Medians are taken over repetitions; each table also lists the per-repetition figures and the
load average when they ran, so a busy machine is visible next to the number it disturbed.
The hand-written analysis (profiles, hot spots) lives in ``benchmarks/notes.md`` and is
appended verbatim.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Line = dict[str, Any]
DBS = (("pg", "PostgreSQL"), ("sqlite", "SQLite (WAL)"))
NOTES = Path(__file__).with_name("notes.md")


def pick(results: Sequence[Line], side: str, workload: str, db: str) -> list[Line]:
    """The lines of one side, workload and store; the peer's solo store-cost run is left out."""
    return [
        r
        for r in results
        if r.get("side") == side
        and r.get("workload") == workload
        and r.get("db") == db
        and r.get("phases") != "throughput"
    ]


def med(lines: Sequence[Line], key: str) -> float | None:
    values = [float(v) for v in (line.get(key) for line in lines) if v is not None]
    return round(statistics.median(values), 3) if values else None


def fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        value = f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    return f"{value}{unit}"


def loads(lines: Sequence[Line]) -> str:
    return ", ".join(f"{line['load_before'][0]:.1f}" for line in lines if "load_before" in line)


def verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("**met**" if ok else "**missed**")


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


def per_rep(lines: Sequence[Line], key: str) -> str:
    return " / ".join(fmt(line.get(key)) for line in lines)


# ---------------------------------------------------------------- compared workloads


PEERS = (("dbos", "DBOS"), ("absurd", "Absurd"))
# The targets of the performance issue (#18): ratios against DBOS on the same machine and server.
PER_KEY_GOAL = 30  # per-key total time, DBOS / runlane
# throughput, runlane / DBOS (issue 40: in each repetition, not only the median)
THROUGHPUT_GOALS = {"pg": 6, "sqlite": 12}
IDLE_HANDOFF_MS = 2  # one-key hand-off p50 on an otherwise idle engine
CPU_GOAL = 8  # Python CPU per workflow on the throughput workload, DBOS / runlane


def peers_in(results: Sequence[Line]) -> list[tuple[str, str]]:
    """The peers with lines in this run (a store a peer does not run on shows '-')."""
    return [(side, label) for side, label in PEERS if any(r.get("side") == side for r in results)]


def throughput(results: Sequence[Line]) -> list[str]:
    peers = peers_in(results)
    head = ["store", "runlane wf/s"]
    for _, label in peers:
        head += [f"{label} wf/s", f"runlane / {label}"]
    head += [
        "target (vs DBOS)",
        "verdict",
        "runs (runlane; " + "; ".join(p[1] for p in peers) + ")",
    ]
    head += ["load (1-min) runlane; " + "; ".join(p[1] for p in peers)]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for db, label in DBS:
        ours = pick(results, "runlane", "throughput", db)
        cells = [label, fmt(med(ours, "workflows_per_s"))]
        runs, load = [per_rep(ours, "workflows_per_s")], [loads(ours)]
        dbos_ratio = None
        for side, _ in peers:
            theirs = pick(results, side, "throughput", db)
            r = ratio(med(ours, "workflows_per_s"), med(theirs, "workflows_per_s"))
            dbos_ratio = r if side == "dbos" else dbos_ratio
            cells += [fmt(med(theirs, "workflows_per_s")), fmt(r, "x")]
            runs.append(per_rep(theirs, "workflows_per_s") or "-")
            load.append(loads(theirs) or "-")
        goal = THROUGHPUT_GOALS[db]
        ok = None if dbos_ratio is None else dbos_ratio >= goal
        cells += [f">= {goal}x", verdict(ok), "; ".join(runs), "; ".join(load)]
        rows.append("| " + " | ".join(cells) + " |")
    n = next((x.get("n") for x in results if x.get("workload") == "throughput"), "?")
    out = [f"## 1. Throughput: {n} workflows x 2 trivial steps, started together", "", *rows]
    absurd = pick(results, "absurd", "throughput", "pg")
    if absurd:
        a = absurd[-1]
        out += [
            "",
            f"Absurd: {a.get('workers')} worker threads, one connection each, claiming"
            f" {a.get('claim_batch')} task(s) at a time and sleeping {a.get('poll_seconds')} s after"
            f" an empty claim; client statements (= commits) per workflow"
            f" {fmt(med(absurd, 'client_stmts_per_wf'))}, empty claims per workflow"
            f" {fmt(med(absurd, 'empty_claims_per_wf'))}; Python CPU"
            f" {fmt(med(absurd, 'py_cpu_ms_per_wf'))} ms and machine CPU"
            f" {fmt(med(absurd, 'machine_cpu_ms_per_wf'))} ms per workflow (most of Absurd's work"
            " runs in the server's stored procedures). See the notes below for how it was driven.",
        ]
    return out


def cpu(results: Sequence[Line]) -> list[str]:
    """CPU per workflow on the throughput workload: the figures that do not swing with load."""
    peers = peers_in(results)
    head = ["store", "runlane Python / server ms"]
    for _, label in peers:
        head += [f"{label} Python / server ms", f"{label} / runlane (Python; server)"]
    head += ["target (Python, vs DBOS)", "verdict"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for db, label in DBS:
        ours = pick(results, "runlane", "throughput", db)
        py, server = med(ours, "py_cpu_ms_per_wf"), med(ours, "server_cpu_ms_per_wf")
        cells = [label, f"{fmt(py)} / {fmt(server)}"]
        dbos_ratio = None
        for side, _ in peers:
            theirs = pick(results, side, "throughput", db)
            their_py, their_server = (
                med(theirs, "py_cpu_ms_per_wf"),
                med(theirs, "server_cpu_ms_per_wf"),
            )
            r = ratio(their_py, py)
            dbos_ratio = r if side == "dbos" else dbos_ratio
            cells += [
                f"{fmt(their_py)} / {fmt(their_server)}",
                f"{fmt(r, 'x')}; {fmt(ratio(their_server, server), 'x')}",
            ]
        ok = None if dbos_ratio is None else dbos_ratio >= CPU_GOAL
        cells += [f">= {CPU_GOAL}x", verdict(ok)]
        rows.append("| " + " | ".join(cells) + " |")
    note = (
        "Python CPU = the driver process's user + system time over the timed batch (the engine"
        " and its store client; DBOS and Absurd likewise); server = the CPU of the PostgreSQL"
        " backends serving the bench database over the same span, read from `/proc` (backends"
        " are matched by the database in their process title). Medians of the repetitions."
    )
    return ["## 1b. CPU per workflow (the throughput workload)", "", *rows, "", note]


def latency(results: Sequence[Line]) -> list[str]:
    peers = peers_in(results)
    head = ["store", "runlane median / p99 ms"]
    for _, label in peers:
        head += [f"{label} median / p99 ms", f"{label} / runlane (median; p99)"]
    head += ["target (vs DBOS)", "verdict", "load runlane; " + "; ".join(p[1] for p in peers)]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for db, label in DBS:
        ours = pick(results, "runlane", "latency", db)
        cells = [label, f"{fmt(med(ours, 'median_ms'))} / {fmt(med(ours, 'p99_ms'))}"]
        load = [loads(ours)]
        ok: bool | None = None
        for side, _ in peers:
            theirs = pick(results, side, "latency", db)
            r50 = ratio(med(theirs, "median_ms"), med(ours, "median_ms"))
            r99 = ratio(med(theirs, "p99_ms"), med(ours, "p99_ms"))
            if side == "dbos" and r50 is not None and r99 is not None:
                ok = r50 >= 6 and r99 >= 4
            cells += [
                f"{fmt(med(theirs, 'median_ms'))} / {fmt(med(theirs, 'p99_ms'))}",
                f"{fmt(r50, 'x')}; {fmt(r99, 'x')}",
            ]
            load.append(loads(theirs) or "-")
        cells += ["median >= 6x, p99 >= 4x", verdict(ok), "; ".join(load)]
        rows.append("| " + " | ".join(cells) + " |")
    runs = next((x.get("runs") for x in results if x.get("workload") == "latency"), "?")
    title = f"## 2. Latency: one workflow of 10 sequential trivial steps, {runs} times (start -> terminal)"
    note = (
        "Absurd's latency is its best case: the caller spawns the task and at once claims and runs"
        " it itself (`work_batch`), so no worker poll interval is in it."
    )
    return [title, "", *rows, *(["", note] if pick(results, "absurd", "latency", "pg") else [])]


def queue(results: Sequence[Line]) -> list[str]:
    rows = [
        "| store | side | total s | hand-off p50 / p99 ms | hand-offs | overlaps | FIFO violations"
        " | runs | load |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for db, label in DBS:
        ours, theirs = pick(results, "runlane", "queue", db), pick(results, "dbos", "queue", db)
        for side, lines in (("runlane", ours), ("DBOS (1 s poll)", theirs)):
            handoff = f"{fmt(med(lines, 'handoff_p50_ms'))} / {fmt(med(lines, 'handoff_p99_ms'))}"
            rows.append(
                f"| {label} | {side} | {fmt(med(lines, 'total_seconds'))} | {handoff}"
                f" | {per_rep(lines, 'handoffs')} | {per_rep(lines, 'overlapping_pairs')} | {per_rep(lines, 'fifo_violations_within_key')}"
                f" | {per_rep(lines, 'total_seconds')} | {loads(lines)} |"
            )
        r = ratio(med(theirs, "total_seconds"), med(ours, "total_seconds"))
        p50 = med(ours, "handoff_p50_ms")
        clean = bool(ours) and all(
            line["overlapping_pairs"] == 0 and line["fifo_violations_within_key"] == 0
            for line in ours
        )
        verdicts += [
            f"- {label}: total time DBOS / runlane = {fmt(r, 'x')} (target >= {PER_KEY_GOAL}x):"
            f" {verdict(None if r is None else r >= PER_KEY_GOAL)}; hand-off p50 {fmt(p50, ' ms')}"
            f" (target < 5 ms): {verdict(None if p50 is None else p50 < 5)};"
            f" zero overlap and zero FIFO violations in every runlane run: {verdict(clean if ours else None)}",
        ]
    verdicts += [handoff_line(results, db, label) for db, label in DBS]
    sample = next((x for x in results if x.get("workload") == "queue"), {})
    title = (
        f"## 3. Per-key serialisation: {sample.get('keys', '?')} keys x {sample.get('per_key', '?')}"
        " runs, singleton limit 1, 2 ms step"
    )
    note = (
        "Hand-off = from the holder's body finishing its step to the next same-key body starting"
        " (runlane: timestamps recorded in the bodies, so it includes the holder's settle write and"
        " the waiter's claim), counted only where the next run was already queued when the holder"
        " finished (`hand-offs` per run): a run started after its predecessor finished measures"
        " the start loop, not a hand-off. FIFO = admission order within a key vs `(created_at, id)`."
        " DBOS reports no hand-off figure; its FIFO check is submission order within a key."
    )
    return [title, "", *rows, "", *verdicts, "", note]


def handoff_line(results: Sequence[Line], db: str, label: str) -> str:
    idle = pick(results, "runlane", "handoff", db)
    if not idle:
        return f"- {label}: one-key hand-off not measured in this run."
    p50 = med(idle, "handoff_p50_ms")
    return (
        f"- {label}, one key x {idle[0]['per_key']} runs on an otherwise idle engine: hand-off"
        f" p50 / p99 {fmt(p50)} / {fmt(med(idle, 'handoff_p99_ms'))} ms (p50 per run:"
        f" {per_rep(idle, 'handoff_p50_ms')}; target < {IDLE_HANDOFF_MS} ms:"
        f" {verdict(None if p50 is None else p50 < IDLE_HANDOFF_MS)}),"
        f" overlaps {per_rep(idle, 'overlapping_pairs')},"
        f" FIFO violations {per_rep(idle, 'fifo_violations_within_key')}"
    )


def floor(results: Sequence[Line], facts: Line) -> list[str]:
    """The store's bare durable commit, and what each compared target leaves per workflow."""
    out = [
        "## 3b. The floor: one durable commit, and what each target leaves for the engine",
        "",
        "| store | durable commit p50 / mean / p99 ms | Python / machine CPU ms per commit"
        " | p50 per run | load |",
        "|---|---|---|---|---|",
    ]
    measured = [(label, pick(results, "runlane", "floor", db)) for db, label in DBS]
    if not any(lines for _, lines in measured):
        return []
    for label, lines in measured:
        if not lines:
            continue
        out.append(
            f"| {label} | {fmt(med(lines, 'commit_p50_ms'))} / {fmt(med(lines, 'commit_mean_ms'))}"
            f" / {fmt(med(lines, 'commit_p99_ms'))} | {fmt(med(lines, 'py_cpu_ms_per_commit'))}"
            f" / {fmt(med(lines, 'machine_cpu_ms_per_commit'))}"
            f" | {per_rep(lines, 'commit_p50_ms')} | {loads(lines)} |"
        )
    out += [
        "",
        "| target | store | budget ms per workflow | runlane ms per workflow"
        " | durable commits in sequence | their floor ms"
        " | runlane Python / machine CPU ms per workflow | what binds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    cores = int(facts.get("cores") or 1)
    for db, label in DBS:
        commit = med(pick(results, "runlane", "floor", db), "commit_p50_ms")
        for b in budgets(results, db):
            floor_ms = None if commit is None else round(commit * b.commits, 3)
            out.append(
                f"| {b.target} | {label} | {fmt(b.budget)} | {fmt(b.now)} | {b.commits}"
                f" | {fmt(floor_ms)} | {fmt(b.py_cpu)} / {fmt(b.machine_cpu)}"
                f" | {binds(b, floor_ms, cores)} |"
            )
    starts = []
    for workload, loop, whole, name in (
        ("throughput", "start_loop_seconds", "seconds", "a start inside the throughput batch"),
        ("queue", "enqueue_seconds", "total_seconds", "a keyed start inside the per-key batch"),
    ):
        for db, label in DBS:
            batch = pick(results, "runlane", workload, db)
            if med(batch, "start_p50_ms") is None:
                continue
            starts.append(
                f"- {label}: {name} takes {fmt(med(batch, 'start_p50_ms'))} ms p50"
                f" ({fmt(med(batch, 'start_p90_ms'))} p90), on an idle engine"
                f" {fmt(med(batch, 'idle_start_p50_ms'))} ms; the start loop is"
                f" {fmt(_share(batch, loop, whole))}% of the batch"
            )
    if starts:
        out += ["", *starts]
    out += [
        "",
        "The floor is a plain client (psycopg; `sqlite3`) inserting one small row per transaction,"
        " each committed before the next is sent, on the same store and durability settings as"
        " runlane's store, measured in runlane's process right after the compared workloads. A"
        " budget is the peer's figure of this run divided by the target's ratio. Durable commits"
        " in sequence: those a workflow's wall time must wait for one after another, whatever the"
        " engine: the start (both sides' scripts start runs one at a time, each start returning"
        " once durable; the runs' own commits overlap later starts), the start and one checkpoint"
        " per step before the next step runs (the last one with the settlement), the settlement"
        " that hands a key's slot over. A start's time inside the throughput and per-key batches"
        " (p50) is beside the same start on an idle engine (per-key: a key of its own, so the"
        " start is admitted at once): where the batch is its start loop, that is what binds, and"
        " where one start alone takes more than a workflow's budget, no engine work elsewhere"
        " can meet the target. CPU per workflow over the workload: runlane's process"
        " (engine and store client; one Python process runs on one core at a time), and the"
        " machine's (every process: engine, server, kernel). With the runs overlapping, a workflow"
        " cannot take less wall time than its process CPU, nor than its machine CPU over the"
        f" {cores} cores; one run at a time (latency), not less than its machine CPU, the client"
        " and the server working in turn.",
    ]
    return out


START_LOOP_SHARE = 0.8  # starts this close to a workflow's time: the start loop binds


def _share(lines: Sequence[Line], part: str, whole: str) -> float | None:
    """The median of ``part`` over ``whole``, in percent."""
    shares = [100 * x[part] / x[whole] for x in lines if x.get(part) is not None and x.get(whole)]
    return round(statistics.median(shares), 1) if shares else None


@dataclass(frozen=True)
class Budget:
    """One target's budget per workflow beside what runlane measured (None: not measured)."""

    target: str
    budget: float | None
    now: float | None
    commits: int  # durable commits a workflow waits for in sequence
    py_cpu: float | None = None
    machine_cpu: float | None = None
    # One run at a time: the client's and the server's work alternate, on one core at a time.
    chain: bool = False
    # Runs started one after another: a start's p50 inside the batch, and on an idle engine.
    start_p50: float | None = None
    idle_start_p50: float | None = None


def budgets(results: Sequence[Line], db: str) -> list[Budget]:
    mine = {
        w: pick(results, "runlane", w, db) for w in ("throughput", "latency", "queue", "handoff")
    }
    dbos = {w: pick(results, "dbos", w, db) for w in ("throughput", "latency", "queue")}

    def per_wf(rate: float | None, goal: float = 1) -> float | None:
        return None if not rate else round(1000 / (rate * goal), 3)

    def per_run(lines: Sequence[Line], goal: float = 1) -> float | None:
        total = med(lines, "total_seconds")
        runs = lines[0]["keys"] * lines[0]["per_key"] if lines else 0
        return None if total is None or not runs else round(total * 1000 / runs / goal, 3)

    def cpu(lines: Sequence[Line]) -> dict[str, float | None]:
        return {
            "py_cpu": med(lines, "py_cpu_ms_per_wf"),
            "machine_cpu": med(lines, "machine_cpu_ms_per_wf"),
        }

    goal = THROUGHPUT_GOALS[db]
    median = med(dbos["latency"], "median_ms")
    return [
        Budget(
            f"throughput (>= {goal}x)",
            per_wf(med(dbos["throughput"], "workflows_per_s"), goal),
            per_wf(med(mine["throughput"], "workflows_per_s")),
            1,
            **cpu(mine["throughput"]),
            start_p50=med(mine["throughput"], "start_p50_ms"),
            idle_start_p50=med(mine["throughput"], "idle_start_p50_ms"),
        ),
        Budget(
            "latency median, 10 steps (>= 6x)",
            None if median is None else round(median / 6, 3),
            med(mine["latency"], "median_ms"),
            11,
            **cpu(mine["latency"]),
            chain=True,
        ),
        Budget(
            f"per-key 50 x 20 (>= {PER_KEY_GOAL}x)",
            per_run(dbos["queue"], PER_KEY_GOAL),
            per_run(mine["queue"]),
            1,
            **cpu(mine["queue"]),
            start_p50=med(mine["queue"], "start_p50_ms"),
            idle_start_p50=med(mine["queue"], "idle_start_p50_ms"),
        ),
        Budget(
            f"idle one-key hand-off p50 (< {IDLE_HANDOFF_MS} ms)",
            float(IDLE_HANDOFF_MS),
            med(mine["handoff"], "handoff_p50_ms"),
            1,
        ),
    ]


def binds(b: Budget, floor: float | None, cores: int) -> str:
    """What keeps a missed target out of reach: every bound the run's own figures exceed (each
    alone would), else the start loop, else nothing found."""
    if b.budget is None or b.now is None:
        return "-"
    if b.now <= b.budget:
        return "met"
    bounds = []
    if floor is not None and floor >= b.budget:
        bounds.append("the floor: its commits alone take more than the budget")
    if b.idle_start_p50 is not None and b.idle_start_p50 >= b.budget:
        # The runs are started one at a time, each start returning once durable: the batch
        # cannot take less than its starts, and one start alone takes more than the budget.
        bounds.append(
            f"a start alone: {fmt(b.idle_start_p50)} ms p50 on an idle engine, and the runs"
            " are started one at a time"
        )
    if b.py_cpu is not None and b.py_cpu >= b.budget:
        bounds.append("CPU: runlane's process needs more than the budget (one core)")
    if b.chain and b.machine_cpu is not None and b.machine_cpu >= b.budget:
        bounds.append("CPU: the client's and the server's work in turn take more than the budget")
    if not b.chain and b.machine_cpu is not None and b.machine_cpu >= b.budget * cores:
        bounds.append(f"CPU: the machine needs more than the budget on its {cores} cores")
    if bounds:
        return "; ".join(bounds)
    if b.start_p50 is not None and b.start_p50 >= START_LOOP_SHARE * b.now:
        # The batch is its start loop: each start waits for its own durable write while the
        # runs started before it share the cores.
        idle = (
            "" if b.idle_start_p50 is None else f" ({fmt(b.idle_start_p50)} ms on an idle engine)"
        )
        return (
            f"the start loop: one start at a time, each {fmt(b.start_p50)} ms p50 under the"
            f" batch's load{idle}"
        )
    return "missed, with room above the floor and the CPU"


# ---------------------------------------------------------------- runlane-only workloads


def store_cost(results: Sequence[Line], facts: Line) -> list[str]:
    lines = pick(results, "runlane", "store_cost", "pg")
    out = ["## 4. Store cost on PostgreSQL (per run of N steps)", ""]
    if not lines:
        return [*out, "Not measured in this run."]
    line = lines[-1]
    out += [
        f"| N steps | target commits (N + 1) | engine commits: sequential / {line['runs']} concurrent"
        " | all commits (+ the benchmark's wait reads) | client statements | statements +"
        " BEGIN/COMMIT | the same per step | verdict (engine commits) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    targets = sorted(int(k.split("_")[1]) for k in line if k.startswith("target_"))
    out += [store_cost_row(line, k) for k in targets]
    peer = [x for x in results if x.get("side") == "dbos" and x.get("phases") == "throughput"]
    if peer:
        p = peer[-1]
        out += [
            "",
            f"DBOS, 2 steps, {p.get('n')} concurrent workflows: xact_commit per workflow"
            f" {fmt(p.get('xact_commit_per_wf'))}, client statements per workflow"
            f" {fmt(p.get('client_stmts_per_wf'))}, pool checkouts {fmt(p.get('pool_checkouts_per_wf'))}.",
        ]
    return [*out, "", store_cost_method(line, facts)]


def store_cost_row(line: Line, k: int) -> str:
    modes = ("sequential", "concurrent")
    engine, commits, stmts, trips = (
        [line.get(f"{name}_per_run_{k}_steps_{m}") for m in modes]
        for name in ("engine_commits", "commits", "statements", "round_trips")
    )
    per_step = [None if x is None else round(x / k, 1) for x in trips]
    # 0.1 of slack: a lease renewal or poll of the engine's life lands in the figure now and then.
    # The target is for one instance starting and running the run (the sequential column).
    ok = None if engine[0] is None else engine[0] <= k + 1.1
    columns = (engine, commits, stmts, trips, per_step)
    cells = [" / ".join(fmt(x) for x in col) for col in columns]
    return f"| {k} | {k + 1} | {' | '.join(cells)} | {verdict(ok)} |"


def store_cost_method(line: Line, facts: Line) -> str:
    method = (
        "Commits = `pg_stat_database.xact_commit` delta of the bench database over one engine's"
        " whole life (open, 20 warm-up runs, work, close; the backends flush their statistics when"
        " they exit), minus the same for an engine with no work"
        f" ({line.get('open_close_commits')} commits). Read-only transactions count as commits too."
    )
    if facts.get("pg_stat_statements"):
        return method
    return method + (
        " pg_stat_statements is installed but not in `shared_preload_libraries` on this server, so"
        " server-side statement counts are skipped; statements and round trips are counted"
        " client-side (`benchmarks/pgcount.py` wraps psycopg's cursor `execute`/`executemany` and"
        " its internal BEGIN/COMMIT/ROLLBACK). Outside pipeline mode each of those is one round trip;"
        " the store pipelines some of them, so they are an upper bound on round trips."
        " Both include each run's `start` and its `wait_for_run` read. Engine commits = all"
        " commits minus the benchmark's `wait_for_run` reads of runs that had already settled"
        " (counted by wrapping the store's `get_run`): what the engine itself writes per run."
    )


def quota(results: Sequence[Line]) -> list[str]:
    title = "## 5. Quota rejections on a full key (`ConcurrencyLimitError`)"
    return refusals(results, "quota", title)


def rate_limit(results: Sequence[Line]) -> list[str]:
    title = "## 5c. Rate limit rejections on a used-up window (`RateLimitError`)"
    return refusals(results, "rate_limit", title)


def refusals(results: Sequence[Line], workload: str, title: str) -> list[str]:
    out = [
        title,
        "",
        "| store | refusals/s (median) | us per refusal | statements + BEGIN/COMMIT per refusal"
        " | round trips per refusal | runs written by refusals | PG row writes"
        " | verdict (one round trip) | verdict (writes nothing) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for db, label in DBS:
        lines = pick(results, "runlane", workload, db)
        if not lines:
            continue
        writes = [
            x.get("runs_written_by_refusals", 0) + (x.get("pg_row_writes_by_refusals") or 0)
            for x in lines
        ]
        counts = lines[-1].get("client_counts_per_refusal") or {}
        stmts = round(sum(v for k, v in counts.items() if k != "waits"), 2) if counts else None
        trips = lines[-1].get("round_trips_per_refusal")
        out.append(
            f"| {label} | {fmt(med(lines, 'refusals_per_s'))} | {fmt(med(lines, 'us_per_refusal'))}"
            f" | {fmt(stmts)} | {fmt(trips)} | {per_rep(lines, 'runs_written_by_refusals')}"
            f" | {per_rep(lines, 'pg_row_writes_by_refusals')}"
            f" | {verdict(None if trips is None else trips <= 1.05)}"
            f" | {verdict(all(w == 0 for w in writes))} |"
        )
    out += [
        "",
        "Round trips are counted by a loopback TCP proxy between the engine and PostgreSQL"
        " (`benchmarks/roundtrips.py`): statements pipelined together and answered together count"
        " once. Row writes = `n_tup_ins + n_tup_upd + n_tup_del` over the bench database's tables between"
        " two engine closes: one engine fills the key and closes, a second one is refused and closes.",
    ]
    return out


def waiters(results: Sequence[Line]) -> list[str]:
    out = ["## 5b. Singleton waiters behind a holder that waits (PostgreSQL, one engine)", ""]
    for line in pick(results, "runlane", "waiters", "pg"):
        third = line["seconds"] / 3
        windows = "; ".join(
            f"{third * i:.0f}-{third * (i + 1):.0f} s: {w['row_writes_per_s']} row writes/s,"
            f" {w['engine_cpu_ms_per_s']} ms engine CPU/s"
            for i, w in enumerate(line["windows"])
        )
        parking = ""
        if "start_seconds" in line:
            parking = (
                f" Their {line['waiters']:,} starts took {line['start_seconds']} s, one after"
                f" another, while those already parked retried; none was pending after"
                f" {line['parked_seconds']} s."
            )
        out.append(
            f"- {line['waiters']:,} runs blocked behind one key whose holder waits for a signal,"
            f" once every waiter was parked: {windows}. Their fallback timers double at each"
            " denial, up to the lease (30 s): the rate falls towards waiters / 30 s; the release"
            f" still hands the slot over at once.{parking}"
        )
    return out


def step_queue(results: Sequence[Line]) -> list[str]:
    out = [
        "## 8. Step queues (`StepQueue(concurrency=8)`)",
        "",
        "| store | runs | wf/s (median) | ideal wf/s | CPU ms per run | most steps inside at once"
        " | hand-off p50 / p99 ms | overlapping hand-offs | verdict (never over the limit) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for db, label in DBS:
        lines = pick(results, "runlane", "step_queue", db)
        if not lines:
            continue
        peak = max(x["peak_inside"] for x in lines)
        overlaps = sum(x["overlapping_handoffs"] for x in lines)
        ok = peak <= lines[0]["concurrency"] and overlaps == 0
        out.append(
            f"| {label} | {lines[0]['runs']:,} | {fmt(med(lines, 'workflows_per_s'))}"
            f" | {fmt(lines[0]['ideal_workflows_per_s'])} | {fmt(med(lines, 'cpu_ms_per_run'))}"
            f" | {peak} | {fmt(med(lines, 'handoff_p50_ms'))} / {fmt(med(lines, 'handoff_p99_ms'))}"
            f" | {overlaps} | {verdict(ok)} |"
        )
    pg = pick(results, "runlane", "step_queue", "pg")
    if pg:
        out += [
            "",
            "A run of one step, one after the other, on PostgreSQL (engine's side, through the"
            " round-trip proxy), with and without a queue, in the same engine:",
            "",
            "| step | round trips per run | statements per run | commits per run |",
            "|---|---|---|---|",
        ]
        for label in ("unqueued", "queued"):
            out.append(
                f"| {label} | {fmt(med(pg, f'round_trips_per_run_{label}'))}"
                f" | {fmt(med(pg, f'statements_per_run_{label}'))}"
                f" | {fmt(med(pg, f'commits_per_run_{label}'))} |"
            )
    out += [
        "",
        "Each step sleeps `step_sleep_ms`; ideal = concurrency / step time. Hand-off: one slot,"
        " a chain of runs lined up behind a holder; the gap from one step's end to the next"
        " step's start (the freeing write wakes the next waiter). A step that names no queue"
        " never touches the queue tables: its figures are the `unqueued` row.",
    ]
    return out


def memory(results: Sequence[Line]) -> list[str]:
    out = ["## 6. Memory (SQLite store, one engine process, VmRSS)", ""]
    for line in pick(results, "runlane", "memory_suspended", "sqlite"):
        delta = line["delta_mb"]
        out.append(
            f"- {line['suspended_runs']:,} runs suspended on a signal wait: idle engine"
            f" {line['idle_rss_mb']} MiB, with the runs {line['rss_with_suspended_mb']} MiB,"
            f" **+{delta} MiB** (target < 20 MB): {verdict(delta < 20)}"
        )
    for line in pick(results, "runlane", "memory_completed", "sqlite"):
        growth = line["growth_after_first_batch_mb"]
        out.append(
            f"- {line['completed_runs']:,} completed runs, RSS after each batch (MiB):"
            f" {', '.join(str(x) for x in line['rss_samples_mb'])}; growth after the first batch"
            f" **{growth} MiB** (target: flat, read as < 5 MiB): {verdict(growth < 5)}"
        )
    return out


def scale(results: Sequence[Line]) -> list[str]:
    out = [
        "## 7. Scale: throughput with finished runs already in the tables vs an empty store",
        "",
        "| store | finished rows | empty wf/s | seeded wf/s | seeded / empty | target | verdict | runs (ratio) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for db, label in DBS:
        lines = pick(results, "runlane", "scale", db)
        if not lines:
            continue
        r = med(lines, "seeded_vs_empty")
        out.append(
            f"| {label} | {lines[0]['finished_rows']:,} | {fmt(med(lines, 'empty_workflows_per_s'))}"
            f" | {fmt(med(lines, 'seeded_workflows_per_s'))} | {fmt(r)} | >= 0.8 |"
            f" {verdict(None if r is None else r >= 0.8)} | {per_rep(lines, 'seeded_vs_empty')} |"
        )
    return out


def prune(results: Sequence[Line]) -> list[str]:
    out = [
        "## 11. Retention: throughput while a driving engine prunes settled runs",
        "",
        "| store | due runs | alone wf/s | while pruning wf/s | pruning / alone | target | verdict"
        " | prune s | pruned/s | runs (ratio) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for db, label in DBS:
        lines = pick(results, "runlane", "prune", db)
        if not lines:
            continue
        r = med(lines, "while_pruning_vs_alone")
        out.append(
            f"| {label} | {lines[0]['finished_rows']:,} | {fmt(med(lines, 'alone_workflows_per_s'))}"
            f" | {fmt(med(lines, 'while_pruning_workflows_per_s'))} | {fmt(r)} | >= 0.8 |"
            f" {verdict(None if r is None else r >= 0.8)} | {fmt(med(lines, 'prune_seconds'))}"
            f" | {fmt(med(lines, 'pruned_per_s'))} | {per_rep(lines, 'while_pruning_vs_alone')} |"
        )
    return out


def schedules(results: Sequence[Line]) -> list[str]:
    out = [
        "## 9. Schedules: each due once a minute (`Schedule(every=60)`), all in the same minute",
        "",
        "| store | schedules | upsert ms each | idle pass: statements / ms | windows fired | passes"
        " | fire s (poll interval) | windows/s | statements (per window) | next minute s"
        " | due query plan | verdict (one query per idle pass)"
        " | verdict (fired within a poll interval) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for db, label in DBS:
        for x in pick(results, "runlane", "schedules", db):
            one = x.get("idle_pass_statements")
            out.append(
                f"| {label} | {x['schedules']:,} | {fmt(x.get('upsert_ms_per_schedule'))}"
                f" | {fmt(one)} / {fmt(x.get('idle_pass_ms'))} | {x['windows_fired']:,}"
                f" | {x['passes']} | {fmt(x['fire_seconds'])} ({fmt(x['poll_interval_seconds'])})"
                f" | {fmt(x.get('windows_per_s'))} | {statements_per_window(x)}"
                f" | {fmt(x.get('next_minute_fire_seconds'))}"
                f" | {x.get('due_query_plan', '-')} | {verdict(None if one is None else one == 1)}"
                f" | {verdict(x['fired_within_poll_interval'])} |"
            )
    out += [
        "",
        "An engine that does not drive (`drive=False`) on a `ManualClock`; a pass is one"
        " `engine.fire_schedules()`. The idle pass runs before any window is due: its one"
        " statement is the due query (statements counted client-side, `benchmarks/pgcount.py`;"
        " PostgreSQL only). Then the clock moves one minute and passes run until one fires"
        " nothing: each pass takes up to 5,000 due schedules in one query and fires them in"
        " store operations of 500 (`Store.fire_windows`: on PostgreSQL one statement for the"
        " compare-and-sets and the runs' insert; two in flight). The next minute is the same"
        " again with the runs of the first in the store. The windows' runs are created, not"
        " executed. The plan is `EXPLAIN` of the due query with the server's default settings.",
    ]
    return out


def statements_per_window(x: Line) -> str:
    if "due_statements" not in x:  # an older line: the rate alone
        return fmt(x.get("due_statements_per_window"))
    return f"{x['due_statements']:,} ({x['due_statements_per_window']:.4f})"


def fan_out(results: Sequence[Line]) -> list[str]:
    out = [
        "## 10. Fan-out: one parent, `ctx.all([ctx.child(...) ...])`",
        "",
        "| store | children | seconds to all settled (median) | children/s | CPU ms per child"
        " | statements per child | socket waits per child | commits per child | runs |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for db, label in DBS:
        lines = pick(results, "runlane", "fan_out", db)
        if not lines:
            continue
        out.append(
            f"| {label} | {lines[0]['children']:,} | {fmt(med(lines, 'seconds'))}"
            f" | {fmt(med(lines, 'children_per_s'))} | {fmt(med(lines, 'py_cpu_ms_per_child'))}"
            f" | {fmt(med(lines, 'statements_per_child'))} | {fmt(med(lines, 'socket_waits_per_child'))}"
            f" | {fmt(med(lines, 'commits_per_child'))} | {per_rep(lines, 'seconds')} |"
        )
    out += [
        "",
        "From the parent's start until it completed, every child settled (children are trivial"
        " workflows with no step). Statements and socket waits are the engine's, client-side;"
        " commits are the bench database's `xact_commit` delta over the measured fan and the"
        " engine's close. PostgreSQL only for the store's cost.",
    ]
    return out


def remote(results: Sequence[Line]) -> list[str]:
    out = [
        "## 12. Remote workflow turns: one Python worker over Redis",
        "",
        "| store | latency, 10 steps: local median / p99 ms | remote median / p99 ms"
        " | throughput, 1,000 x 2 steps: local wf/s | remote wf/s | remote runs (latency ms;"
        " wf/s) |",
        "|---|---|---|---|---|---|",
    ]
    for db, label in DBS:
        near = pick(results, "runlane", "remote_latency", db)
        many = pick(results, "runlane", "remote_throughput", db)
        if not near and not many:
            continue
        local = pick(results, "runlane", "latency", db)
        batch = pick(results, "runlane", "throughput", db)
        out.append(
            f"| {label} | {fmt(med(local, 'median_ms'))} / {fmt(med(local, 'p99_ms'))}"
            f" | {fmt(med(near, 'median_ms'))} / {fmt(med(near, 'p99_ms'))}"
            f" | {fmt(med(batch, 'workflows_per_s'))} | {fmt(med(many, 'workflows_per_s'))}"
            f" | {per_rep(near, 'median_ms')}; {per_rep(many, 'workflows_per_s')} |"
        )
    out += [
        "",
        "The workflow of sections 1 and 2 declared remote: its turns are decided by one worker"
        " process (`benchmarks/remote.py`) over Redis, the engine holding `RemoteWorkflow(...)`"
        " only; its steps run on the worker inside the turn, so a run is one turn however many"
        " steps it has. Local = the same workload in-process, from this run's sections 1 and 2.",
    ]
    return out


# ---------------------------------------------------------------- the page


def trips(value: float | None) -> str:
    """Round trips per start: a batch's are a few thousandths."""
    return "-" if value is None else f"{value:.3f}"


def batched(results: Sequence[Line]) -> list[str]:
    """Starts one at a time (``start``) against ``start_many``: what a start costs the client,
    and what the throughput and per-key workloads reach either way."""
    out = [
        "## 13. Batch starts: one at a time vs `Engine.start_many`",
        "",
        "Per start (keyed starts on an engine that executes nothing, `benchmarks/start_cost.py`):"
        " Python CPU, round trips (a proxy counts them) and statements. Then the throughput"
        " workload (1) and the per-key workload (3) with their starts made 25 a `start_many`"
        " (benchmarks/notes.md has 100 a call: the runs past the engine's free room are claimed"
        " one at a time)."
        " Medians of the repetitions; every repetition in brackets.",
        "",
        "| store | way | CPU ms / start | round trips / start | statements / start"
        " | starts/s | throughput wf/s | per-key total s | per-key py CPU ms / wf |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for db, label in DBS:
        cost = pick(results, "runlane", "start_cost", db)
        if not cost:
            continue
        ways = (
            ("one", "one at a time", "throughput", "queue"),
            ("batched", "batched", "throughput_batched", "queue_batched"),
        )
        for way, name, thru, keyed in ways:
            flows, per_key = pick(results, "runlane", thru, db), pick(results, "runlane", keyed, db)
            out.append(
                f"| {label} | {name} | {fmt(med(cost, f'{way}_cpu_ms_per_start'))}"
                f" ({per_rep(cost, f'{way}_cpu_ms_per_start')})"
                f" | {trips(med(cost, f'{way}_round_trips_per_start'))}"
                f" | {fmt(med(cost, f'{way}_statements_per_start'))}"
                f" | {fmt(med(cost, f'{way}_starts_per_s'))}"
                f" | {fmt(med(flows, 'workflows_per_s'))} ({per_rep(flows, 'workflows_per_s')})"
                f" | {fmt(med(per_key, 'total_seconds'))} ({per_rep(per_key, 'total_seconds')})"
                f" | {fmt(med(per_key, 'py_cpu_ms_per_wf'))} |"
            )
    return [*out, "", *against_dbos(results)]


def worst(ours: Sequence[Line], theirs: Sequence[Line], key: str, higher: bool) -> float | None:
    """runlane's ratio to the peer taking runlane's worst repetition against the peer's best:
    what "in each repetition" can promise. ``higher``: a bigger ``key`` is better."""
    a = [float(x[key]) for x in ours if x.get(key) is not None]
    b = [float(x[key]) for x in theirs if x.get(key) is not None]
    if not a or not b:
        return None
    return ratio(min(a), max(b)) if higher else ratio(min(b), max(a))


def against_dbos(results: Sequence[Line]) -> list[str]:
    """Issue 40's targets against DBOS, with each way of starting: throughput >= 6x / 12x in
    every repetition, per-key >= 30x. DBOS starts one workflow at a time (it has no batch
    start), so the batched rows weigh what a runlane user can do against what a DBOS user can."""
    out = [
        "Against DBOS (its starts are one at a time: it has no batch start). Worst = runlane's"
        " slowest repetition against DBOS's fastest.",
        "",
        "| store | way | throughput / DBOS: median, worst | target | verdict"
        " | per-key DBOS / runlane: median, worst | target | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for db, label in DBS:
        thru_dbos, key_dbos = (
            pick(results, "dbos", "throughput", db),
            pick(results, "dbos", "queue", db),
        )
        if not thru_dbos:
            continue
        goal = THROUGHPUT_GOALS[db]
        for name, thru, keyed in (
            ("one at a time", "throughput", "queue"),
            ("batched", "throughput_batched", "queue_batched"),
        ):
            flows, per_key = pick(results, "runlane", thru, db), pick(results, "runlane", keyed, db)
            if not flows:
                continue
            t_med = ratio(med(flows, "workflows_per_s"), med(thru_dbos, "workflows_per_s"))
            t_worst = worst(flows, thru_dbos, "workflows_per_s", higher=True)
            k_med = ratio(med(key_dbos, "total_seconds"), med(per_key, "total_seconds"))
            k_worst = worst(per_key, key_dbos, "total_seconds", higher=False)
            out.append(
                f"| {label} | {name} | {fmt(t_med, 'x')}, {fmt(t_worst, 'x')} | >= {goal}x each"
                f" | {verdict(None if t_worst is None else t_worst >= goal)}"
                f" | {fmt(k_med, 'x')}, {fmt(k_worst, 'x')} | >= {PER_KEY_GOAL}x"
                f" | {verdict(None if k_med is None else k_med >= PER_KEY_GOAL)} |"
            )
    return out


def header(facts: Line, command: str, quick: bool, results: Sequence[Line]) -> list[str]:
    dbos = next((x.get("dbos_version") for x in results if x.get("dbos_version")), "?")
    absurd = next((x for x in results if x.get("absurd_sdk_version")), None)
    versions = f" DBOS {dbos}"
    if absurd is not None:
        sha = str(absurd.get("absurd_schema_sha256", "?"))[:12]
        versions += f"; Absurd SDK {absurd['absurd_sdk_version']} (schema sha256 {sha}...)"
    import scale_report  # beside this file: a script's directory is on sys.path

    busy = scale_report.busy(facts["load_start"], facts["load_end"], facts["cores"] or 1)
    mode = (
        "QUICK mode (1 repetition, smaller sizes: figures are indicative only)"
        if quick
        else "3 repetitions, medians"
    )
    return [
        "# Benchmarks: runlane vs DBOS Transact and Absurd",
        "",
        "Generated by `benchmarks/run.py`; do not edit by hand (the analysis is in `benchmarks/notes.md`).",
        "",
        f"- Command: `{command}` ({mode}); wall time {facts['wall_seconds']} s.",
        f"- Machine: {facts['cores']} cores ({facts['cpu']}), {facts['memory_gib']} GiB RAM;"
        f" PostgreSQL {facts['postgres']}; SQLite {facts['sqlite']}; Python {facts['python']};"
        f"{versions}.",
        f"- Load average (1/5/15 min) at start {facts['load_start']}, at end {facts['load_end']}"
        + (
            " - **the machine was busy** (other test suites share it); per-run loads are in the tables."
            if busy
            else "."
        ),
        "- The sides run alternately, each in its own fresh process (each peer from its own venv)"
        " and on its own fresh database (`runlane_bench` / `dbos_bench` / `absurd_bench`, or a new"
        " SQLite file in WAL mode). Absurd runs on PostgreSQL only.",
        "- runlane's trivial steps are `async def` (in-process, on the event loop); DBOS's are sync"
        " functions (its model); Absurd's are sync `ctx.step` callables run by worker threads."
        " Ratios are runlane relative to the peer, > 1 means runlane is better.",
        *(f"- **{reason}**" for reason in facts.get("skipped", [])),
    ]


def render(
    results: Sequence[Line], facts: Line, command: str, quick: bool, failures: Sequence[str]
) -> str:
    import scale_report  # beside this file: a script's directory is on sys.path

    sections: list[Callable[[], list[str]]] = [
        lambda: throughput(results),
        lambda: cpu(results),
        lambda: latency(results),
        lambda: queue(results),
        lambda: floor(results, facts),
        lambda: store_cost(results, facts),
        lambda: quota(results),
        lambda: rate_limit(results),
        lambda: waiters(results),
        lambda: memory(results),
        lambda: scale(results),
        lambda: step_queue(results),
        lambda: schedules(results),
        lambda: fan_out(results),
        lambda: prune(results),
        lambda: remote(results),
        lambda: batched(results),
        scale_report.queues_section,
        scale_report.million_section,
        scale_report.wal_section,
    ]
    out = header(facts, command, quick, results)
    for section in sections:
        out += ["", *section()]
    if failures:
        out += ["", "## Failures in this run", "", *(f"- {f}" for f in failures)]
    if NOTES.exists():
        out += ["", NOTES.read_text().rstrip()]
    return "\n".join(out) + "\n"
