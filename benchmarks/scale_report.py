"""BENCHMARKS.md's sections on issue 40: runlane against the job queues (from
``benchmarks/results/queues.json``, written by ``queues.py``), the million-run store (from
``million.json``, written by ``million.py``) and the WAL a run writes (``wal.json``, written by
``wal.py``), with the issue's targets stated met or missed. ``report.render`` calls them; a
missing file leaves its section saying how to make it. Run as a script, it renders the three
again in place in BENCHMARKS.md (what ``make bench-queues``, ``bench-scale`` and ``bench-wal``
do after measuring), leaving every other section as the last ``make bench`` wrote it.

    .venv/bin/python benchmarks/scale_report.py [BENCHMARKS.md]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
PEERS = ("procrastinate", "graphile-worker", "pg-boss")
PHASES = {
    "throughput": "(a) 1,000 one-step runs / jobs, enqueue all then wait for all",
    "perkey": "(b) 50 keys x 20, one at a time per key, 2 ms step",
    "hotkey": "(b') one hot key, 20 queued, 2 ms step",
    "latency": "(c) enqueue -> done, one at a time, 50 times",
}


def fmt(value: float, digits: int = 2) -> str:
    return f"{value:,.{digits}f}"


def spread(f: dict[str, Any], key: str, digits: int = 2) -> str:
    low, high = f.get(f"{key}_range", [f[key], f[key]])
    return f"{fmt(f[key], digits)} ({fmt(low, digits)}-{fmt(high, digits)})"


OURS = ("runlane", "runlane-batched")


def busy(load_start: list[float], load_end: list[float], cores: int) -> bool:
    """Whether a measurement ran on a busy machine: its 1-minute load, at the start or the end,
    above half its cores (BENCHMARKS.md's header says so the same way)."""
    return max(load_start[0], load_end[0]) > 0.5 * cores


def load_words(facts: dict[str, Any]) -> str:
    """How loaded the machine was over a measurement, in words."""
    cores = facts.get("machine", {}).get("cores") or 2
    if busy(facts["load_start"], facts["load_end"], cores):
        return "**the machine was loaded** (other test suites share it)"
    return "the machine was quiet"


def queue_rows(phase: str, sides: dict[str, dict[str, Any]]) -> list[str]:
    key = "median_ms" if phase == "latency" else "seconds"
    ours = [sides.get(side, {}).get(key) for side in OURS]
    head = "median ms (range)" if phase == "latency" else "seconds (range)"
    out = [
        f"| side | {head} | runlane's ratio (one at a time / batched) | FIFO violations / overlaps"
        " | client CPU ms/job | server CPU ms/job | WAL bytes/job | commits/job |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, f in sides.items():
        if key not in f:
            out.append(f"| {name} | failed: {'; '.join(f.get('errors', []))[:120]} |")
            continue
        ratio = (
            "-"
            if name in OURS
            else " / ".join(f"{f[key] / one:.2f}x" if one else "-" for one in ours)
        )
        order = (
            f"{f['fifo_violations_within_key']:g} / {f['overlapping_pairs']:g}"
            if "overlapping_pairs" in f
            else "-"
        )
        out.append(
            f"| {name} | {spread(f, key)} | {ratio} | {order} | {fmt(f['client_cpu_ms_per_job'])}"
            f" | {fmt(f['server_cpu_ms_per_job'])} | {fmt(f['wal_bytes_per_job'], 0)}"
            f" | {fmt(f['commits_per_job'])} |"
        )
    return out


def ratio(summary: dict[str, Any], phase: str, peer: str, ours: str = "runlane") -> float | None:
    key = "median_ms" if phase == "latency" else "seconds"
    sides = summary.get(phase, {})
    if key not in sides.get(ours, {}) or key not in sides.get(peer, {}):
        return None
    return float(sides[peer][key] / sides[ours][key])


def verdict(ok: bool | None) -> str:
    return "not measured" if ok is None else ("**met**" if ok else "**missed**")


def queue_targets(summary: dict[str, Any]) -> list[str]:
    """The issue's targets, each judged on runlane's better side (batched starts where they
    were measured: the issue asks for both and names ``start_many`` as the way), the other
    side's figure beside it."""
    ratios = {(p, q, o): ratio(summary, p, q, o) for p in PHASES for q in PEERS for o in OURS}

    def best(phase: str, peer: str) -> float | None:
        found = [r for o in OURS if (r := ratios[(phase, peer, o)]) is not None]
        return max(found) if found else None

    def every(phase: str, at_least: float) -> bool | None:
        found = [best(phase, q) for q in PEERS]
        return None if None in found else all(r is not None and r > at_least for r in found)

    def shown(phase: str) -> str:
        return ", ".join(f"{q} {r:.2f}x" for q in PEERS if (r := best(phase, q)))

    def both(phase: str, peer: str) -> str:
        one, batched = (ratios[(phase, peer, o)] for o in OURS)
        return f"{one or 0:.2f}x one at a time, {batched or 0:.2f}x batched"

    graphile_tp = best("throughput", "graphile-worker")
    graphile_pk = best("perkey", "graphile-worker")
    keyed = [summary.get("perkey", {}).get(o, {}) for o in OURS]
    keyed = [k for k in keyed if "overlapping_pairs" in k]
    clean = bool(keyed) and all(
        k["overlapping_pairs"] == 0 and k["fifo_violations_within_key"] == 0 for k in keyed
    )
    return [
        "Each target is judged on runlane's better side; both are in the tables.",
        "",
        "| target (issue 40) | measured | verdict |",
        "|---|---|---|",
        f"| (b) per-key: runlane below every queue | {shown('perkey')} | "
        f"{verdict(every('perkey', 1.0))} |",
        f"| (b) per-key: >= 2x graphile-worker | {both('perkey', 'graphile-worker')} | "
        f"{verdict(None if graphile_pk is None else graphile_pk >= 2)} |",
        "| (b) zero overlaps and FIFO violations (runlane, both sides) | "
        + ", ".join(
            f"{k['overlapping_pairs']:g} / {k['fifo_violations_within_key']:g}" for k in keyed
        )
        + f" | {verdict(clean)} |",
        f"| (b') one hot key reported for every peer | {shown('hotkey')} | "
        f"{verdict(every('hotkey', 0.0))} |",
        f"| (a) throughput: >= 2x graphile-worker | {both('throughput', 'graphile-worker')} | "
        f"{verdict(None if graphile_tp is None else graphile_tp >= 2)} |",
        f"| (c) latency: runlane's median below every queue's | {shown('latency')} | "
        f"{verdict(every('latency', 1.0))} |",
    ]


def queues_section(path: Path = RESULTS / "queues.json") -> list[str]:
    out = ["## 14. Job queues: procrastinate, graphile-worker, pg-boss (issue 40)", ""]
    if not path.exists():
        return [*out, "Not measured yet: `make bench-queues`."]
    data = json.loads(path.read_text())
    facts, summary = data["facts"], data["summary"]
    out += [
        f"From `benchmarks/results/queues.json` (`make bench-queues`, {facts['plan']['reps']}"
        f" repetitions, medians, wall time {facts['wall_seconds']} s). The load average went from"
        f" {facts['load_start']} to {facts['load_end']}: {load_words(facts)}. The sides"
        " alternate, each in its own process and on its own fresh database. Ratios are the"
        " peer's figure over runlane's, one start at a time and batched (`start_many`, 25 a"
        " call): > 1 means runlane is better. Commits are every transaction of the side's"
        " database (`xact_commit`), the peers' and runlane's waiting reads included; WAL is the whole cluster's, so a busy"
        " neighbour inflates it (see benchmarks/notes.md).",
        "",
    ]
    for phase, title in PHASES.items():
        if phase in summary:
            out += [f"### {title}", "", *queue_rows(phase, summary[phase]), ""]
            out += [f"![{title}](benchmarks/charts/queues-{phase}.png)", ""]
    out += ["![CPU per job](benchmarks/charts/queues-cpu.png)", ""]
    return [*out, "### Targets", "", *queue_targets(summary)]


READ_TARGETS = {"list_runs": 50.0, "status counts": 100.0, "lanes": 50.0, "active counts": 100.0}


def read_target(name: str) -> float:
    return next(v for k, v in READ_TARGETS.items() if name.startswith(k))


def million_section(path: Path = RESULTS / "million.json") -> list[str]:
    out = ["## 15. A million runs: the claim path and the console's reads (issue 40)", ""]
    if not path.exists():
        return [*out, "Not measured yet: `make bench-scale`."]
    data = json.loads(path.read_text())
    size = data["facts"]["size"]
    dbs = [db for db in ("pg", "sqlite") if db in data]
    out += [
        f"From `benchmarks/results/million.json` (`make bench-scale`): {size['finished']:,}"
        f" finished runs and {size['active']:,} active ones ({size['keys']:,} singleton lanes,"
        f" {size['values']} attribute values and tags). Load average"
        f" {data['facts']['load_start']} -> {data['facts']['load_end']}:"
        f" {load_words(data['facts'])}. The reads are timed in a process set up as `runlane serve`"
        " sets up its own (what start-up made is frozen out of the garbage collector's full"
        " passes, `gc.freeze`); the last row is the lanes overview without that.",
        "",
        "| read | target | " + " | ".join(f"{db} p50 / p99 ms | verdict" for db in dbs) + " |",
        "|---|---|" + "---|---|" * len(dbs),
    ]
    for name in data[dbs[0]]["reads"]:
        limit = read_target(name)
        cells = []
        for db in dbs:
            f = data[db]["reads"][name]
            cells.append(
                f"{fmt(f['p50_ms'])} / {fmt(f['p99_ms'])} | {verdict(f['p99_ms'] < limit)}"
            )
        out.append(f"| {name} | < {limit:g} ms | " + " | ".join(cells) + " |")
    out += [
        "",
        "| claim path (1,000 one-step runs) | empty runs/s | seeded runs/s | ratio (>= 0.9x) |",
    ]
    out.append("|---|---|---|---|")
    for db in dbs:
        f = data[db]
        empty = ", ".join(fmt(x, 0) for x in f["claim_empty_wf_s"])
        seeded = ", ".join(fmt(x, 0) for x in f["claim_seeded_wf_s"])
        out.append(
            f"| {db} | {empty} | {seeded} | {f['claim_ratio']:.2f}x {verdict(f['claim_ratio'] >= 0.9)} |"
        )
    out += [
        "",
        "![reads](benchmarks/charts/million-reads.png)",
        "",
        "![claim path](benchmarks/charts/million-claim.png)",
        "",
        'The plans of each read (EXPLAIN) are in benchmarks/notes.md, "A million runs".',
    ]
    return out


WAL_BEFORE = 2698
"""WAL bytes of a one-step run when issue 40 was filed (its (a) workload)."""


def wal_section(path: Path = RESULTS / "wal.json") -> list[str]:
    out = ["## 16. WAL per run, on a PostgreSQL server of its own (issue 40)", ""]
    if not path.exists():
        return [*out, "Not measured yet: `make bench-wal`."]
    data = json.loads(path.read_text())
    out += [
        "From `benchmarks/results/wal.json` (`make bench-wal`, `benchmarks/wal.py`): the runs on"
        " a server that holds nothing else, its WAL read back with `pg_waldump`. Without page"
        " images is what the records themselves hold; with them, the high mark (each workload"
        " starts right after a checkpoint). Load does not change these figures.",
        "",
        "| workload | bytes / run, records only | bytes / run, with page images | records / run |",
        "|---|---|---|---|",
    ]
    for workload, f in data.items():
        out.append(
            f"| {workload} | {fmt(f['rec_bytes_per_run'], 0)} | {fmt(f['total_bytes_per_run'], 0)}"
            f" | {fmt(f['records_per_run'])} |"
        )
    one = data.get("one-step runs")
    if one is not None:
        met = one["total_bytes_per_run"] < WAL_BEFORE
        out += [
            "",
            f"Target (a): fewer WAL bytes per one-step run than when the issue was filed"
            f" ({WAL_BEFORE:,}): {fmt(one['total_bytes_per_run'], 0)} {verdict(met)}.",
            "",
            "Where a one-step run's bytes go (with page images; per run):",
            "",
            "| relation | record | bytes | records |",
            "|---|---|---|---|",
            *(
                f"| {row['relation']} | {row['record']} | {fmt(row['total_bytes_per_run'], 1)}"
                f" | {fmt(row['per_run'])} |"
                for row in one["by_record"][:15]
            ),
        ]
    return out


SPLICED = {
    "## 14. ": queues_section,
    "## 15. ": million_section,
    "## 16. ": wal_section,
}


def splice(text: str) -> str:
    """``text`` (BENCHMARKS.md) with sections 14-16 rendered again; a section not there yet
    goes before the hand-written analysis."""
    for heading, section in SPLICED.items():
        fresh = "\n".join(section()) + "\n"
        start = text.find("\n" + heading)
        if start < 0:
            at = text.find("\n## Analysis")
            text = text[: at + 1] + fresh + "\n" + text[at + 1 :]
            continue
        end = text.find("\n## ", start + 1)
        text = text[: start + 1] + fresh + text[end:]
    return text


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS.parent.parent / "BENCHMARKS.md"
    target.write_text(splice(target.read_text()))
