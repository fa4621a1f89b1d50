"""Check the admission model (model/admission.pml) with spin: `make model` runs this.

Each check generates a verifier with spin, compiles it and searches the model's whole state
space; a broken property (an assertion, an invalid end state, an acceptance cycle) fails the
check, prints the steps that break it, and makes the command exit 1. `--mutant NAME` checks a
deliberately broken protocol instead (the model's MUTANT_* switches): its checks must then fail,
which shows they can. `--quick` runs the smallest configuration only. RELIABILITY.md ("A checked
model of admission") records the figures.

Standard library only, so it runs without the project's environment: spin and a C compiler are
all it needs.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODEL = Path(__file__).with_name("admission.pml")

MUTANTS = {
    "fifo": "MUTANT_FIFO",
    "nowake": "MUTANT_NOWAKE",
    "snapshot": "MUTANT_SNAPSHOT",
    "unlocked": "MUTANT_UNLOCKED",
    "quota": "MUTANT_QUOTA",
}
"""The mutations `--mutant` takes (`make model MUTANT=...`), and the model's switch of each."""


@dataclasses.dataclass(frozen=True)
class Check:
    """One verifier run: the model's bounds and switches, and a safety search or an LTL
    property's (under weak fairness)."""

    name: str
    what: str
    defines: dict[str, int]
    ltl: str | None = None
    quick: bool = False
    hash_bits: int = 26  # pan's hash table: 2**hash_bits slots (8 bytes each)

    def spin_args(self, mutant: str | None) -> list[str]:
        args = [f"-D{key}={value}" for key, value in self.defines.items()]
        if self.ltl is not None:
            args += ["-DLTL", "-DLIVE=1"]
        if mutant is not None:
            args.append(f"-D{MUTANTS[mutant]}")
        return args

    def cflags(self, shortest: bool) -> list[str]:
        if self.ltl is not None:
            return ["-O2", "-DNFAIR=3"]
        return ["-O2", "-DSAFETY", "-DNOFAIR", *(["-DREACH"] if shortest else [])]

    def pan_args(self, shortest: bool) -> list[str]:
        args = ["-m100000", f"-w{self.hash_bits}"]
        if self.ltl is not None:
            return [*args, "-a", "-f", "-N", self.ltl]
        return [*args, "-i"] if shortest else args


CHECKS = [
    Check(
        "lane",
        "3 runs of a singleton key of 2 slots, 2 engines; 2 crashes, a stalled lease, a lost "
        "run queue message and a cancel, each at any step: mutual exclusion, FIFO, no lost wake",
        {"RUNS": 3, "LIMIT": 2, "REQUEUES": 0},
    ),
    Check(
        "quota",
        "3 runs under a quota of 2 and a singleton key of 1 slot, 2 engines; starts, 2 requeues, "
        "2 crashes and a cancel at any step: the quota, and the lane's properties with one slot",
        {"RUNS": 3, "LIMIT": 1, "QUOTA": 2, "REQUEUES": 2, "STALLS": 0, "LOSSES": 0},
        hash_bits=23,
    ),
    Check(
        "liveness",
        "the lane without fallback timers or stalled leases: every run settles, so every "
        "waiter is admitted (or cancelled), under weak fairness",
        {"RUNS": 3, "LIMIT": 2, "REQUEUES": 0, "STALLS": 0, "FALLBACK": 0},
        ltl="settles",
        hash_bits=24,
    ),
    Check(
        "small",
        "2 runs of a key of 1 slot, 2 engines, one crash: the safety properties, in seconds",
        {"RUNS": 2, "LIMIT": 1, "CRASHES": 1},
        quick=True,
        hash_bits=20,
    ),
]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a verifier run found, in pan's figures."""

    check: Check
    errors: int
    states: int
    transitions: int
    depth: int
    memory_mb: float
    seconds: float
    violation: str | None
    output: str
    counterexample: list[str]

    def line(self) -> str:
        verdict = "ok" if self.errors == 0 else f"FAILED ({self.violation or 'see pan output'})"
        return (
            f"{self.check.name:9} {verdict:22} {self.states:>11,} states "
            f"{self.transitions:>12,} transitions  depth {self.depth:>4}  "
            f"{self.memory_mb:>7.1f} MB  {self.seconds:5.1f} s"
        )


def _figure(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    return 0.0 if match is None else float(match[1])


def _violation(output: str) -> str | None:
    """The properties pan reports broken by its shortest counterexample: assertions' variables,
    or the kind of error (with -i, pan reports each shorter one it finds)."""
    found = [
        (int(depth), name or kind)
        for name, kind, depth in re.findall(
            r"^pan:\d+: (?:assertion violated (\w+)|(acceptance cycle|invalid end state)) "
            r"\(at depth (\d+)\)",
            output,
            re.MULTILINE,
        )
    ]
    if not found:
        return None
    shortest = min(depth for depth, _ in found)
    return ", ".join(sorted({name for depth, name in found if depth == shortest}))


def run_check(check: Check, mutant: str | None, workdir: Path) -> Outcome:
    """Generate, compile and run the verifier of ``check`` in ``workdir``. A safety property
    found broken is searched again for a shortest counterexample (pan -i), the one shown."""
    shutil.copy(MODEL, workdir / MODEL.name)
    started = time.monotonic()
    spin = ["spin", *check.spin_args(mutant), "-a", MODEL.name]
    subprocess.run(spin, cwd=workdir, check=True, capture_output=True, text=True)
    output, errors = _verify(check, workdir, shortest=False)
    if errors and check.ltl is None:
        output, errors = _verify(check, workdir, shortest=True)
    return Outcome(
        check,
        errors,
        int(_figure(r"([\d.e+]+) states, stored", output)),
        int(_figure(r"([\d.e+]+) transitions", output)),
        int(_figure(r"depth reached (\d+)", output)),
        _figure(r"([\d.]+)\s+total actual memory usage", output),
        time.monotonic() - started,
        _violation(output) if errors else None,
        output,
        _replay(check, mutant, workdir) if errors else [],
    )


def _verify(check: Check, workdir: Path, *, shortest: bool) -> tuple[str, int]:
    """Compile pan and run it: its output, and how many errors it found."""
    compile_pan = ["cc", *check.cflags(shortest), "-w", "-o", "pan", "pan.c"]
    subprocess.run(compile_pan, cwd=workdir, check=True, capture_output=True)
    result = subprocess.run(
        ["./pan", *check.pan_args(shortest)], cwd=workdir, capture_output=True, text=True
    )
    output = result.stdout + result.stderr
    return output, int(_figure(r"errors: (\d+)", output)) or int(result.returncode != 0)


def _replay(check: Check, mutant: str | None, workdir: Path) -> list[str]:
    """The counterexample pan wrote, replayed by spin: the steps' printf lines, in order."""
    if not (workdir / f"{MODEL.name}.trail").exists():
        return []
    replay = subprocess.run(
        ["spin", "-t", *check.spin_args(mutant), MODEL.name],
        cwd=workdir,
        capture_output=True,
        text=True,
    )
    steps = []
    for line in replay.stdout.splitlines():
        if line.startswith("spin: trail ends"):
            break
        if line.strip() and not line.startswith(("ltl ", "Never claim", "spin:")):
            steps.append(line.strip())
    return steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mutant", choices=sorted(MUTANTS), help="check a broken protocol")
    parser.add_argument("--quick", action="store_true", help="the smallest configuration only")
    parser.add_argument("--only", action="append", help="the named check only (repeatable)")
    parser.add_argument(
        "--define",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set one of the model's bounds or switches in every check run (repeatable)",
    )
    parser.add_argument("--verbose", action="store_true", help="print pan's whole output")
    args = parser.parse_args(argv)
    if shutil.which("spin") is None:
        print("spin is not installed (Debian: apt-get install spin)", file=sys.stderr)
        return 2
    defines = dict(_define(text) for text in args.define)
    checks = [
        dataclasses.replace(c, defines={**c.defines, **defines})
        for c in CHECKS
        if (c.quick or not args.quick) and (not args.only or c.name in args.only)
    ]
    failed = 0
    for check in checks:
        with tempfile.TemporaryDirectory(prefix="runlane-model-") as workdir:
            outcome = run_check(check, args.mutant, Path(workdir))
        print(outcome.line(), flush=True)
        if args.verbose:
            print(outcome.output)
        if outcome.counterexample:
            print("  counterexample:")
            print("\n".join(f"    {step}" for step in outcome.counterexample), flush=True)
        failed += outcome.errors > 0
    return 1 if failed else 0


def _define(text: str) -> tuple[str, int]:
    name, _, value = text.partition("=")
    if not re.fullmatch(r"[A-Z]+", name) or not value.isdigit():
        raise SystemExit(f"--define takes NAME=VALUE, a number (got {text!r})")
    return name, int(value)


if __name__ == "__main__":
    sys.exit(main())
