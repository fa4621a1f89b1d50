"""Run every workload on PostgreSQL and SQLite (WAL), runlane and its peers alternating; write the report.

    .venv/bin/python benchmarks/run.py [--quick] [--reps 3] [--out BENCHMARKS.md] [--peers dbos,absurd]

runlane's side runs in ``benchmarks/workloads.py``; each peer's driver is in ``benchmarks/peers/``
and runs in the peer's own venv (``.peers-venv`` for DBOS Transact, ``.absurd-venv`` for Absurd),
created here from ``benchmarks/*-requirements.txt`` when missing. Absurd's schema is read from
``../shared/peers/absurd/absurd.sql`` (or ``$BENCH_ABSURD_SCHEMA``); without it Absurd is
skipped, and the report says so. Each side runs in a fresh process per repetition. Raw JSON
lines go to a temp directory (printed); the report is rebuilt from them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import common
import report

ROOT = Path(__file__).resolve().parent.parent
RUNLANE_PY = ROOT / ".venv" / "bin" / "python"
COMPARED = "throughput,latency,queue"
# runlane's side also measures the store's bare durable commit (``floor``), in the same process
# right after the compared workloads: what the targets' budgets are set against (report.py).
OURS = f"{COMPARED},floor"
ABSURD_SCHEMA = Path(
    os.environ.get(
        "BENCH_ABSURD_SCHEMA", ROOT.parent / "shared" / "peers" / "absurd" / "absurd.sql"
    )
)


@dataclass(frozen=True)
class Peer:
    """A peer engine: its venv, the requirements it is built from, its driver and its stores."""

    name: str
    venv: str
    requirements: str
    driver: str
    dbs: tuple[str, ...]
    phases: str

    @property
    def python(self) -> Path:
        return ROOT / self.venv / "bin" / "python"


DBOS = Peer(
    "dbos",
    ".peers-venv",
    "benchmarks/peer-requirements.txt",
    "benchmarks/peers/dbos_driver.py",
    ("pg", "sqlite"),
    COMPARED,
)
ABSURD = Peer(
    "absurd",
    ".absurd-venv",
    "benchmarks/absurd-requirements.txt",
    "benchmarks/peers/absurd_driver.py",
    ("pg",),
    "throughput,latency",
)

FULL: dict[str, Any] = {
    "reps": 3,
    "runlane": {},
    "dbos": [],
    "absurd": [],
    "solo": {
        "handoff": {"per_key": 50},
        "store_cost": {"n": 200, "steps": [1, 2, 10]},
        "quota": {"attempts": 2000},
        "rate_limit": {"attempts": 2000},
        "memory_suspended": {"n": 10_000},
        "memory_completed": {"n": 100_000, "batch": 10_000},
        "scale": {"n": 1000, "finished": 100_000},
        "waiters": {"n": 10_000, "seconds": 90.0},
        "step_queue": {"n": 1000},
        "schedules": {"n": 10_000},
        "fan_out": {"n": 10_000},
        "remote_latency": {"runs": 50, "steps": 10},
        "remote_throughput": {"n": 1000, "steps": 2},
        "prune": {"n": 1000, "finished": 100_000},
        "throughput_batched": {"n": 1000, "batch": 25},
        "queue_batched": {"keys": 50, "per_key": 20, "batch": 25},
        "start_cost": {"n": 1000, "kind": "keyed"},
    },
}
QUICK: dict[str, Any] = {
    "reps": 1,
    "runlane": {
        "throughput": {"n": 300},
        "latency": {"runs": 20},
        "queue": {"keys": 10, "per_key": 5},
    },
    "dbos": [
        "--n",
        "300",
        "--seq-runs",
        "20",
        "--keys",
        "10",
        "--per-key",
        "5",
        "--stats-settle",
        "1",
    ],
    "absurd": ["--n", "300", "--seq-runs", "20"],
    "solo": {
        "handoff": {"per_key": 20},
        "store_cost": {"n": 40, "steps": [2, 10]},
        "quota": {"attempts": 300},
        "rate_limit": {"attempts": 300},
        "memory_suspended": {"n": 2000},
        "memory_completed": {"n": 10_000, "batch": 2_000},
        "scale": {"n": 300, "finished": 20_000},
        "waiters": {"n": 2000, "seconds": 30.0},
        "step_queue": {"n": 300, "chain": 20},
        "schedules": {"n": 2000},
        "fan_out": {"n": 2000},
        "remote_latency": {"runs": 20, "steps": 10},
        "remote_throughput": {"n": 300, "steps": 2},
        "prune": {"n": 300, "finished": 20_000},
        "throughput_batched": {"n": 300, "batch": 25},
        "queue_batched": {"keys": 10, "per_key": 5, "batch": 25},
        "start_cost": {"n": 300, "kind": "keyed"},
    },
}
SOLO_DBS = {
    "handoff": ["pg", "sqlite"],
    "store_cost": ["pg"],
    "quota": ["pg", "sqlite"],
    "rate_limit": ["pg", "sqlite"],
    "memory_suspended": ["sqlite"],
    "memory_completed": ["sqlite"],
    "scale": ["pg", "sqlite"],
    "waiters": ["pg"],
    "step_queue": ["pg", "sqlite"],
    "schedules": ["pg", "sqlite"],
    "fan_out": ["pg", "sqlite"],
    "remote_latency": ["pg", "sqlite"],
    "remote_throughput": ["pg", "sqlite"],
    "prune": ["pg", "sqlite"],
    "throughput_batched": ["pg", "sqlite"],
    "queue_batched": ["pg", "sqlite"],
    "start_cost": ["pg", "sqlite"],
}
ONE_REP = ("store_cost", "waiters", "schedules")


@dataclass
class Session:
    quick: bool
    reps: int
    tmp: Path
    plan: dict[str, Any]
    results: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    peers: list[Peer] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def jsonl(self) -> Path:
        return self.tmp / "results.jsonl"


def run_child(session: Session, label: str, cmd: list[str], timeout: float) -> list[dict[str, Any]]:
    """Run one side in its own process (once more if it fails); return its JSON lines."""
    lines = run_once(session, label, cmd, timeout)
    if not lines:
        lines = run_once(session, f"{label}-retry", cmd, timeout)
    return lines


def run_once(session: Session, label: str, cmd: list[str], timeout: float) -> list[dict[str, Any]]:
    out = session.tmp / f"{label}.jsonl"
    print(f"--> {label}: {' '.join(cmd)}", flush=True)
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            [*cmd, "--json", str(out)], cwd=ROOT, timeout=timeout, capture_output=True, text=True
        )
    except subprocess.TimeoutExpired:
        session.failures.append(f"{label}: timed out after {timeout:.0f}s")
        return []
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-12:]
        short = [line.strip() for line in tail[-3:]]
        session.failures.append(f"{label}: exit {proc.returncode}: " + " | ".join(short))
        print("\n".join(tail), flush=True)
    print(f"    {time.monotonic() - t0:.1f}s, load {common.load_avg()}", flush=True)
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def runlane_side(
    session: Session, db: str, workloads: str, params: dict[str, Any], rep: int
) -> None:
    cmd = [str(RUNLANE_PY), "benchmarks/workloads.py", "--db", db, "--workloads", workloads]
    cmd += ["--params", json.dumps(params)]
    for line in run_child(session, f"runlane-{db}-{workloads}-{rep}", cmd, 1800):
        record(session, {"side": "runlane", "rep": rep, **line})


def peer_side(session: Session, peer: Peer, db: str, rep: int, phases: str = "") -> None:
    phases = phases or peer.phases
    cmd = [str(peer.python), peer.driver, "--db", db, "--phases", phases]
    if peer is DBOS and db == "sqlite":
        cmd += ["--sqlite-wal", "--sqlite-path", str(session.tmp / "dbos" / "dbos_sys.sqlite")]
    if peer is ABSURD:
        cmd += ["--schema", str(ABSURD_SCHEMA)]
    cmd += session.plan[peer.name]
    load = common.load_avg()
    for line in run_child(session, f"{peer.name}-{db}-{phases}-{rep}", cmd, 240):
        extra = {"phases": phases}
        for key in ("dbos_version", "absurd_sdk_version", "absurd_schema_sha256"):
            if line.get(key):
                extra[key] = line[key]
        for phase in phases.split(","):
            if phase in line:
                figures = {"load_before": load, **line[phase], "load_after": common.load_avg()}
                record(
                    session,
                    {
                        "side": peer.name,
                        "rep": rep,
                        "workload": phase,
                        "db": db,
                        **extra,
                        **figures,
                    },
                )


def record(session: Session, line: dict[str, Any]) -> None:
    session.results.append(line)
    with session.jsonl.open("a") as f:
        f.write(json.dumps(line) + "\n")


def compared(session: Session) -> None:
    """The side-by-side workloads: each repetition alternates which side goes first."""
    params = session.plan["runlane"]
    for rep in range(1, session.reps + 1):
        for db in ("pg", "sqlite"):
            sides = [lambda db=db, rep=rep: runlane_side(session, db, OURS, params, rep)]
            sides += [
                lambda db=db, rep=rep, peer=peer: peer_side(session, peer, db, rep)
                for peer in session.peers
                if db in peer.dbs
            ]
            for side in sides if rep % 2 else reversed(sides):
                side()


def solo(session: Session) -> None:
    """runlane-only workloads (store cost, quota and rate limit refusals, memory, scale)."""
    for name, params in session.plan["solo"].items():
        reps = 1 if name.startswith("memory") or name in ONE_REP else session.reps
        for rep in range(1, reps + 1):
            for db in SOLO_DBS[name]:
                runlane_side(session, db, name, {name: params}, rep)
    if not session.quick and DBOS in session.peers:
        # The peer's commits per workflow are computed only when throughput runs alone.
        peer_side(session, DBOS, "pg", 1, phases="throughput")


def ensure_venv(peer: Peer) -> None:
    """The peer's own venv, built from its pinned requirements when missing."""
    stamp, reqs = ROOT / peer.venv / ".installed", ROOT / peer.requirements
    if stamp.exists() and stamp.stat().st_mtime >= reqs.stat().st_mtime:
        return
    print(f"--> building {peer.venv} from {peer.requirements}", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(ROOT / peer.venv)], check=True)
    subprocess.run([str(peer.python), "-m", "pip", "install", "-q", "-r", str(reqs)], check=True)
    stamp.touch()  # the same stamp as the Makefile's


def choose_peers(session: Session, wanted: str) -> None:
    """The peers this run compares with; a peer that cannot run here is skipped, with a reason."""
    for peer in (DBOS, ABSURD):
        if wanted and peer.name not in wanted.split(","):
            continue
        if peer is ABSURD and not ABSURD_SCHEMA.is_file():
            reason = (
                f"Absurd skipped: its schema is not at {ABSURD_SCHEMA} (set BENCH_ABSURD_SCHEMA)"
            )
            print(reason, flush=True)
            session.skipped.append(reason)
            continue
        try:
            ensure_venv(peer)
        except subprocess.CalledProcessError as exc:
            reason = f"{peer.name} skipped: its venv could not be built ({exc})"
            print(reason, flush=True)
            session.skipped.append(reason)
            continue
        session.peers.append(peer)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", default=os.environ.get("QUICK") == "1")
    p.add_argument("--reps", type=int, default=0, help="repetitions (default 3; 1 when quick)")
    p.add_argument(
        "--out",
        default=os.environ.get("BENCH_OUT", ""),
        help="the report (default BENCHMARKS.md; /tmp/BENCHMARKS-quick.md when quick)",
    )
    p.add_argument("--only", default="", help="'compared' or 'solo' (default both)")
    p.add_argument("--from-jsonl", default="", help="rebuild the report from a previous run")
    p.add_argument("--peers", default="", help="peers to compare with, e.g. 'dbos' (default all)")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    plan = QUICK if args.quick else FULL
    if not args.out:  # a quick run never overwrites the committed page
        args.out = "/tmp/BENCHMARKS-quick.md" if args.quick else str(ROOT / "BENCHMARKS.md")
    tmp = Path(tempfile.mkdtemp(prefix="runlane-bench-"))
    session = Session(args.quick, args.reps or plan["reps"], tmp, plan)
    command = "make bench QUICK=1" if args.quick else "make bench"
    facts = {**common.machine(), "postgres": common.pg_version(), "python": sys.version.split()[0]}
    facts["load_start"] = common.load_avg()
    t0 = time.monotonic()
    if args.from_jsonl:
        raw = Path(args.from_jsonl)
        session.results = [json.loads(x) for x in raw.read_text().splitlines()]
        facts = json.loads(raw.with_name("facts.json").read_text())
        command = facts["command"]
    else:
        print(f"raw results: {session.jsonl}", flush=True)
        choose_peers(session, args.peers)
        if args.only in ("", "compared"):
            compared(session)
        if args.only in ("", "solo"):
            solo(session)
    if not args.from_jsonl:
        facts["load_end"] = common.load_avg()
        facts["wall_seconds"] = round(time.monotonic() - t0)
        facts["pg_stat_statements"] = common.pg_stat_statements_ready()
        facts["command"] = command
        facts["failures"] = session.failures
        facts["skipped"] = session.skipped
        session.jsonl.with_name("facts.json").write_text(json.dumps(facts))
    session.failures = facts.get("failures", [])
    text = report.render(session.results, facts, command, session.quick, session.failures)
    Path(args.out).write_text(text)
    print(f"wrote {args.out} in {facts['wall_seconds']}s; raw results {session.jsonl}")
    if session.failures:
        print("FAILURES:\n  " + "\n  ".join(session.failures))


if __name__ == "__main__":
    main()
