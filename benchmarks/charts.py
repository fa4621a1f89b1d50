"""The benchmark pictures: one chart per job-queue workload with every side, and the million-run
store's reads and claim path (PNG, matplotlib's Agg backend), into ``benchmarks/charts/``.

    .venv/bin/python benchmarks/charts.py [--queues FILE] [--million FILE] [--out DIR]

Drawn from the figures ``benchmarks/queues.py`` and ``benchmarks/million.py`` wrote
(``benchmarks/results/*.json``); a file that is missing draws nothing. BENCHMARKS.md shows them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
OUT = ROOT / "benchmarks" / "charts"
COLOURS = {
    "runlane": "#2b6cb0",
    "runlane-batched": "#63b3ed",
    "procrastinate": "#9c4221",
    "graphile-worker": "#2f855a",
    "pg-boss": "#6b46c1",
}
# What each queue workload's chart shows: (phase, figure, title, axis label).
QUEUE_CHARTS = (
    ("throughput", "seconds", "1,000 one-step runs / jobs: enqueue all, wait for all", "seconds"),
    ("perkey", "seconds", "50 keys x 20, one at a time per key, 2 ms step", "seconds"),
    ("hotkey", "seconds", "one hot key, 20 queued, 2 ms step", "seconds (log)"),
    ("latency", "median_ms", "enqueue -> done, one at a time (median)", "ms"),
)


def bars(ax: Any, sides: dict[str, dict[str, Any]], figure: str, *, log: bool = False) -> None:
    names = list(sides)
    values = [sides[n][figure] for n in names]
    low = [
        v - sides[n].get(f"{figure}_range", [v, v])[0] for n, v in zip(names, values, strict=True)
    ]
    high = [
        sides[n].get(f"{figure}_range", [v, v])[1] - v for n, v in zip(names, values, strict=True)
    ]
    colours = [COLOURS.get(n, "#718096") for n in names]
    ax.bar(names, values, color=colours, yerr=[low, high], capsize=4)
    for i, v in enumerate(values):
        ax.annotate(
            f"{v:.3g}",
            (i, v),
            ha="left",
            va="bottom",
            fontsize=8,
            xytext=(8, 2),
            textcoords="offset points",
        )
    if log:
        ax.set_yscale("log")


def queue_charts(summary: dict[str, Any], out: Path) -> list[Path]:
    drawn = []
    for phase, figure, title, label in QUEUE_CHARTS:
        sides = {k: v for k, v in summary.get(phase, {}).items() if figure in v}
        if not sides:
            continue
        fig, ax = plt.subplots(figsize=(6.4, 3.6))
        bars(ax, sides, figure, log=phase == "hotkey")
        ax.set_title(f"{title}\n(median of 3, bars: range; lower is better)", fontsize=10)
        ax.set_ylabel(label)
        drawn.append(save(fig, out / f"queues-{phase}.png"))
    cpu = {side: f for side, f in summary.get("throughput", {}).items() if "seconds" in f}
    if cpu:
        fig, ax = plt.subplots(figsize=(6.4, 3.6))
        names = list(cpu)
        x = range(len(names))
        for offset, key, hatch in (
            (-0.2, "client_cpu_ms_per_job", ""),
            (0.2, "server_cpu_ms_per_job", "//"),
        ):
            ax.bar(
                [i + offset for i in x],
                [cpu[n][key] for n in names],
                width=0.4,
                hatch=hatch,
                color=[COLOURS.get(n, "#718096") for n in names],
                label=key.split("_")[0],
            )
        ax.set_xticks(list(x), names)
        ax.set_ylabel("CPU ms per job")
        ax.set_title(
            "CPU per run / job, throughput workload (plain: client, hatched: server)", fontsize=10
        )
        drawn.append(save(fig, out / "queues-cpu.png"))
    return drawn


def million_charts(result: dict[str, Any], out: Path) -> list[Path]:
    drawn = []
    dbs = [db for db in ("pg", "sqlite") if db in result]
    if not dbs:
        return drawn
    names = list(result[dbs[0]]["reads"])
    fig, ax = plt.subplots(figsize=(8, 4.8))
    for j, db in enumerate(dbs):
        p99 = [result[db]["reads"][n]["p99_ms"] for n in names]
        ax.barh(
            [i + 0.4 * j for i in range(len(names))],
            p99,
            height=0.4,
            label={"pg": "PostgreSQL", "sqlite": "SQLite"}[db],
        )
    ax.set_yticks([i + 0.2 for i in range(len(names))], names, fontsize=8)
    ax.set_xscale("log")
    for limit in (50, 100):
        ax.axvline(limit, color="#c53030", linestyle="--", linewidth=0.8)
    ax.set_xlabel("p99 ms (log); dashed: the 50 ms and 100 ms targets")
    finished = result["facts"]["size"]["finished"]
    ax.set_title(f"Reads on {finished:,} finished + 10,000 active runs", fontsize=10)
    ax.legend(fontsize=8)
    drawn.append(save(fig, out / "million-reads.png"))
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for db in dbs:
        empty, seeded = result[db]["claim_empty_wf_s"], result[db]["claim_seeded_wf_s"]
        ax.plot(range(1, len(empty) + 1), empty, marker="o", label=f"{db}, empty")
        ax.plot(
            range(1, len(seeded) + 1), seeded, marker="s", linestyle="--", label=f"{db}, seeded"
        )
    ax.set_xlabel("repetition")
    ax.set_ylabel("runs / s")
    ax.set_title(f"Claim path: empty store vs {finished:,} finished runs", fontsize=10)
    ax.legend(fontsize=8)
    drawn.append(save(fig, out / "million-claim.png"))
    return drawn


def save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})  # no version stamp: stable bytes
    plt.close(fig)
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--queues", default=str(RESULTS / "queues.json"))
    p.add_argument("--million", default=str(RESULTS / "million.json"))
    p.add_argument("--out", default=str(OUT))
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    drawn = []
    if Path(args.queues).exists():
        drawn += queue_charts(json.loads(Path(args.queues).read_text())["summary"], out)
    if Path(args.million).exists():
        drawn += million_charts(json.loads(Path(args.million).read_text()), out)
    for path in drawn:
        print(f"drew {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


if __name__ == "__main__":
    main()
