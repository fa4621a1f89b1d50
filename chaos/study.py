"""What failovers cost, by replication mode: the figures of RELIABILITY.md's "PostgreSQL failover".

python -m chaos.study RUNS SECONDS [SEED]

For each topology (a synchronous standby; an asynchronous one; an asynchronous one cut off 1 s
before each crash), RUNS chaos runs of SECONDS with failovers as their only fault, seeds SEED,
SEED + 1, ... (random by default); each run's report goes to the temporary folder it names. Prints
one markdown row a run: what the failovers lost and what that did.
"""

from __future__ import annotations

import random
import sys
import tempfile
from pathlib import Path

from .check import Findings
from .faults import FAILOVER
from .runner import Options, Outcome, run_chaos

TOPOLOGIES = (("sync", 0.0), ("async", 0.0), ("async", 1.0))
DRAIN = 40.0
"""Seconds the runs have to end: an asynchronous failover leaves some waiting for ever."""

HEADER = (
    "| standby | seed | failovers | acknowledged starts lost | step records lost (acknowledged)"
    " | settlements lost | runs stuck | steps run 3+ times | overlaps, FIFO, quota: all executions"
    " | the same: executions the store kept |\n|---|---|---|---|---|---|---|---|---|---|"
)


def row(options: Options, outcome: Outcome) -> str:
    found, lost = outcome.findings, outcome.findings.losses
    standby = options.standby + (f", cut off {options.lag:.0f} s" if options.lag else "")
    return (
        f"| {standby} | {options.seed} | {outcome.injector.counts[FAILOVER]} | "
        f"{len(found.offences['lost'])} | {len(lost.records)} ({len(lost.acknowledged)}) | "
        f"{len(lost.settlements)} | {len(found.offences['stuck'])} | "
        f"{len(found.offences['executed_over_twice'])} | {_sweeps(found)} | "
        f"{_sweeps(found.kept or Findings())} |"
    )


def _sweeps(findings: Findings) -> str:
    return ", ".join(str(len(findings.offences[k])) for k in ("overlap", "fifo", "quota"))


def main(argv: list[str]) -> int:
    runs, seconds = int(argv[0]), float(argv[1])
    seed = int(argv[2]) if len(argv) > 2 else random.SystemRandom().randrange(1 << 32)
    folder = Path(tempfile.mkdtemp(prefix="runlane-failovers-"))
    rows = []
    for standby, lag in TOPOLOGIES:
        for n in range(runs):
            report = folder / f"{standby}-{lag:.0f}-{seed + n}.md"
            options = Options(seconds, seed + n, report, standby, lag, (FAILOVER,), DRAIN)
            rows.append(row(options, run_chaos(options)))
            print(rows[-1], flush=True)
    print("\n".join([HEADER, *rows]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
