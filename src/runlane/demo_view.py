"""The demo's terminal view: a live table of orders, singleton lanes, quotas and the render farm.

On a terminal it is a rich ``Live`` display with the event log scrolling above it. When stdout is
not a terminal (a pipe, CI) it prints the events and a one-line status every few seconds instead,
then the final tables once, so the output stays short.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from .cli_tables import status_text
from .engine import Engine
from .models import Run, RunStatus, StepRecord, StepStatus

if TYPE_CHECKING:
    from .demo import Farm, Progress

LANES = ("north", "south", "east")
STATUS_EVERY = 5.0  # seconds between status lines when not on a terminal


@dataclass(frozen=True)
class Snapshot:
    """The runs as the store saw them at one moment of the story."""

    runs: list[Run]
    order_steps: dict[str, list[StepRecord]]
    elapsed: float

    def of(self, workflow: str) -> list[Run]:
        return sorted((r for r in self.runs if r.workflow == workflow), key=lambda r: r.id)

    @property
    def all_settled(self) -> bool:
        return bool(self.runs) and all(r.is_terminal for r in self.runs)

    def counts(self, workflow: str) -> tuple[int, int]:
        """(completed, total) runs of ``workflow``."""
        runs = self.of(workflow)
        return sum(r.status == RunStatus.COMPLETED for r in runs), len(runs)


async def take_snapshot(engine: Engine, elapsed: float) -> Snapshot:
    runs = await engine.list_runs(limit=1000)
    steps = {r.id: await engine.list_steps(r.id) for r in runs if r.workflow == "demo.order"}
    return Snapshot(runs, steps, elapsed)


# ---------------------------------------------------------------- tables


def order_stage(run: Run, steps: list[StepRecord], children: list[Run]) -> str:
    """What the order is doing now, from its step records."""
    if run.is_terminal:
        return "shipped" if run.status == RunStatus.COMPLETED else str(run.status)
    if any(s.kind == "child" for s in steps) or children:
        done = sum(c.status == RunStatus.COMPLETED for c in children)
        return f"shipping: {len(children) - done} of {len(children)} parcels in transit"
    if not steps:
        return "queued"
    last = max(steps, key=lambda s: s.seq)
    if last.kind == "signal" and last.status == StepStatus.PENDING:
        return "[bold magenta]waiting for approval[/] (signal)"
    if last.kind == "sleep" and last.status == StepStatus.PENDING:
        return "fraud hold (durable sleep)"
    if last.name == "orders.charge_card" and last.status != StepStatus.COMPLETED:
        return f"charging card, retry after attempt {last.attempts} failed"
    return {
        "orders.reserve_stock": "stock reserved",
        "orders.charge_card": "card charged",
    }.get(last.name, escape(last.name))


def orders_table(snap: Snapshot) -> Table:
    table = Table("order", "status", "stage", "shipments", title="orders", title_justify="left")
    children = [r for r in snap.runs if r.workflow == "demo.ship_item"]
    for run in snap.of("demo.order"):
        mine = [c for c in children if c.parent_id == run.id]
        done = sum(c.status == RunStatus.COMPLETED for c in mine)
        stage = order_stage(run, snap.order_steps.get(run.id, []), mine)
        shipped = f"{done}/{len(mine)}" if mine else "-"
        table.add_row(run.id.removeprefix("order-"), status_text(run.status), stage, shipped)
    return table


def lanes_table(snap: Snapshot) -> Table:
    table = Table(
        "lane", "in its slot", "queued", "done", "backlog",
        title="singleton lanes (limit 1 per store key)", title_justify="left",
    )  # fmt: skip
    syncs = snap.of("demo.sync_store")
    for lane in LANES:
        runs = [r for r in syncs if r.input.get("store") == lane]
        active = [r for r in runs if not r.is_terminal]
        holders = [r for r in active if r.holds_slot or r.status == RunStatus.RUNNING]
        queued = len(active) - len(holders)
        done = sum(r.status == RunStatus.COMPLETED for r in runs)
        table.add_row(
            f"store:{lane}",
            ", ".join(escape(r.id) for r in holders) or "[dim]idle[/]",
            str(queued),
            f"{done}/{len(runs)}",
            "[yellow]" + "■" * queued + "[/]",
        )
    return table


def quota_table(snap: Snapshot, progress: Progress) -> Table:
    from .demo import TENANT_LIMIT

    table = Table(
        "tenant", "active / limit", "accepted", "refused", "completed",
        title="concurrency quota (reject fast)", title_justify="left",
    )  # fmt: skip
    reports = snap.of("demo.render_report")
    for tenant in sorted(progress.accepted):
        runs = [r for r in reports if r.input.get("tenant") == tenant]
        active = sum(not r.is_terminal for r in runs)
        done = sum(r.status == RunStatus.COMPLETED for r in runs)
        refused = progress.refused.get(tenant, 0)
        table.add_row(
            f"tenant:{tenant}",
            f"{active} / {TENANT_LIMIT}",
            str(progress.accepted[tenant]),
            f"[yellow]{refused}[/]" if refused else "0",
            str(done),
        )
    return table


def farm_line(farm: Farm) -> str:
    from .demo import FARM_SLOTS

    slots = "[green]■[/]" * farm.inside + "[dim]□[/]" * max(0, FARM_SLOTS - farm.inside)
    return (
        f"render farm (a step queue of {FARM_SLOTS} slots every tenant shares): {slots}"
        f" {farm.inside} rendering, {farm.rendered} rendered, at most {farm.peak} at once"
    )


def headline(snap: Snapshot) -> str:
    counts = Counter(str(r.status) for r in snap.runs)
    parts = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    return f"[bold]story {snap.elapsed:5.1f}s[/] · {len(snap.runs)} runs ({parts or 'none yet'})"


def summary(snap: Snapshot, progress: Progress) -> str:
    names = [
        ("demo.order", "orders"),
        ("demo.ship_item", "shipments"),
        ("demo.sync_store", "store syncs"),
        ("demo.render_report", "reports"),
    ]
    done = ", ".join(f"{a}/{b} {label}" for wf, label in names for a, b in [snap.counts(wf)])
    refused = sum(progress.refused.values())
    return f"completed: {done}; {refused} starts refused by the quota (ConcurrencyLimitError)"


# ---------------------------------------------------------------- the view


class DemoView:
    """Shows the story: live on a terminal, as bounded plain lines elsewhere."""

    def __init__(self, console: Console, db: str, speed: float, farm: Farm) -> None:
        self.console = console
        self.farm = farm
        self.db = db
        self.speed = speed
        self.live: Live | None = None
        self.elapsed = 0.0
        self.last_status = 0.0

    def render(self, snap: Snapshot, progress: Progress) -> RenderableType:
        return Panel(
            Group(
                headline(snap),
                orders_table(snap),
                lanes_table(snap),
                quota_table(snap, progress),
                farm_line(self.farm),
            ),
            title="runlane demo",
            subtitle=escape(str(self.db)),
        )

    def opening(self, runs: list[Run], elapsed: float) -> None:
        self.console.print(f"[bold]runlane demo[/] · store {escape(self.db)}")
        active = [r for r in runs if not r.is_terminal]
        if active:
            self.console.print(
                f"[bold green]resuming {len(active)} runs from a previous session[/]"
                f" ({len(runs) - len(active)} already finished, story at {elapsed:.0f}s)"
            )
        else:
            self.console.print(
                "starting a new story; Ctrl-C (or kill -9) and rerun to see it resume"
            )

    def event(self, message: str) -> None:
        self.console.print(f"[dim]{self.elapsed:5.1f}s[/] {message}", soft_wrap=True)

    def __enter__(self) -> DemoView:
        if self.console.is_terminal:
            self.live = Live(console=self.console, refresh_per_second=4, transient=False)
            self.live.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    def update(self, snap: Snapshot, progress: Progress) -> None:
        self.elapsed = snap.elapsed
        if self.live is not None:
            self.live.update(self.render(snap, progress))
        elif snap.elapsed - self.last_status >= STATUS_EVERY:
            self.last_status = snap.elapsed
            self.console.print(headline(snap))

    def finish(self, snap: Snapshot, progress: Progress) -> None:
        if self.live is not None:
            self.live.update(self.render(snap, progress))
            self.live.stop()
            self.live = None
        else:
            self.console.print(self.render(snap, progress))
        self.console.print(f"[bold green]{summary(snap, progress)}[/]", soft_wrap=True)
        self.console.print(
            f"render farm: {self.farm.rendered} reports rendered through its step queue,"
            f" at most {self.farm.peak} at once"
        )
        self.console.print(f"all runs settled in {snap.elapsed:.1f}s of story time")
        self.where_to_look()

    def where_to_look(self) -> None:
        """How to look at the runs the demo left in its database, from a shell or a browser."""
        runlane = runlane_command()
        self.console.print("[bold]look at its runs:[/]")
        for line in (
            f"  {runlane} runs list --db {self.db}",
            f"  {runlane} runs show order-A-1001 --db {self.db}",
            f"  {runlane} serve --db {self.db}   # the dashboard, at http://127.0.0.1:8080",
        ):
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def give_up(self, snap: Snapshot) -> None:
        stuck = [f"{r.id} ({r.status})" for r in snap.runs if not r.is_terminal]
        self.console.print(f"[bold red]demo did not finish; still active:[/] {', '.join(stuck)}")


def runlane_command() -> str:
    """How to call the command line that runs this demo: ``runlane`` when that is the one on
    the PATH, else the script's path (``make demo`` runs it from a venv of its own)."""
    script = Path(sys.argv[0])
    if script.name != "runlane" or not script.is_file():
        return "runlane"
    on_path = shutil.which("runlane")
    if on_path is not None and Path(on_path).resolve() == script.resolve():
        return "runlane"
    return os.path.relpath(script)
