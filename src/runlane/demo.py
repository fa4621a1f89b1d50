"""``runlane demo``: the embedded showcase, on a SQLite file that survives the process.

Three stories run side by side on one engine:

* **orders**: steps (with a flaky card charge that is retried), a durable sleep, a human approval
  (a signal the demo answers) and a fan-out of shipment child workflows;
* **lanes**: a singleton workflow per store key, one slot each; a burst on one key backs up only
  its own lane while the others keep flowing;
* **quota**: a per-tenant concurrency quota; a burst over the limit is refused at the door;
  the reports it lets in share one render farm, a step queue of two slots that every tenant's
  render steps line up for (the highest priority first, tenants served in turn).

Every start uses a deterministic run id and the script's progress is saved beside the database,
so killing the demo (Ctrl-C, or SIGKILL) and running it again resumes the runs where they stopped.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from . import definitions as rl
from .context import Context
from .engine import Engine
from .errors import ConcurrencyLimitError
from .models import JSON, StepStatus
from .retry import Retry
from .step_queues import StepQueue
from .stores import open_store

DEMO_DIR = "runlane-demo"
LANES = ("north", "south", "east")
TENANT_LIMIT = 3
FARM_SLOTS = 2
HARD_LIMIT = 150.0  # seconds of story time before the demo gives up (at speed 1)
Log = Callable[[str], None]


# ---------------------------------------------------------------- the workflows


@dataclass
class Farm:
    """The render farm as the render steps see it: how many are inside now, and at most."""

    inside: int = 0
    peak: int = 0
    rendered: int = 0


def render_farm() -> StepQueue:
    """Every tenant's render steps share these slots, served in turn (fairness by tenant)."""
    return StepQueue("render-farm", concurrency=FARM_SLOTS, fairness="key")


def build_workflows(speed: float, log: Log, farm: Farm | None = None) -> list[Any]:
    """The demo's workflows; ``speed`` compresses the simulated work and the retry backoff."""
    charged_once: set[str] = set()
    farm = farm if farm is not None else Farm()

    async def work(seconds: float) -> None:
        await asyncio.sleep(seconds / speed)

    @rl.step(name="orders.reserve_stock")
    async def reserve_stock(input: dict[str, Any]) -> JSON:
        await work(0.6)
        return {"reserved": input["items"]}

    @rl.step(name="orders.charge_card", retry=Retry(max_attempts=3, backoff=0.8 / speed))
    async def charge_card(input: dict[str, Any]) -> JSON:
        await work(0.5)
        if input["order"] not in charged_once:
            charged_once.add(input["order"])
            log(f"[red]card gateway timed out[/] charging {input['order']}; the step will retry")
            raise ConnectionError("card gateway timed out")
        return {"charged": 20 * len(input["items"])}

    @rl.step(name="shipping.pack")
    async def pack(input: dict[str, Any]) -> JSON:
        await work(0.5)
        return {"parcel": f"{input['order']}/{input['sku']}"}

    @rl.step(name="shipping.hand_to_carrier")
    async def hand_to_carrier(input: dict[str, Any]) -> JSON:
        await work(0.3)
        return {"tracking": f"TRK-{input['order']}-{input['sku']}".upper()}

    @rl.workflow(name="demo.ship_item")
    async def ship_item(ctx: Context, input: dict[str, Any]) -> JSON:
        await ctx.step(pack, input)
        await ctx.sleep(input["transit"])
        return await ctx.step(hand_to_carrier, input)

    @rl.workflow(name="demo.order", tags=("demo", "order"))
    async def order(ctx: Context, input: dict[str, Any]) -> JSON:
        await ctx.step(reserve_stock, input)
        await ctx.step(charge_card, input)
        await ctx.sleep(input["hold"])
        approval = await ctx.wait_for_signal("approve")
        shipments = await ctx.all(
            [ctx.child(ship_item, {**input, "sku": sku}) for sku in input["items"]]
        )
        return {"approved_by": approval, "tracking": [s["tracking"] for s in shipments]}

    @rl.step(name="stores.pull_inventory")
    async def pull_inventory(input: dict[str, Any]) -> JSON:
        await work(1.5)
        return {"store": input["store"], "skus": 120}

    @rl.step(name="stores.reconcile")
    async def reconcile(input: dict[str, Any]) -> JSON:
        await work(1.0)
        return {"store": input["store"], "fixed": input["skus"] % 7}

    @rl.workflow(
        name="demo.sync_store",
        singleton=rl.Singleton(key=lambda i: f"store:{i['store']}", limit=1),
        tags=("demo", "lane"),
    )
    async def sync_store(ctx: Context, input: dict[str, Any]) -> JSON:
        stock = await ctx.step(pull_inventory, input)
        return await ctx.step(reconcile, stock)

    @rl.step(name="reports.render", queue="render-farm")
    async def render(input: dict[str, Any]) -> JSON:
        farm.inside += 1
        farm.peak = max(farm.peak, farm.inside)
        try:
            await work(1.0)
        finally:
            farm.inside -= 1
        farm.rendered += 1
        return {"pages": 12}

    @rl.workflow(
        name="demo.render_report",
        concurrency=rl.Concurrency(key=lambda i: f"tenant:{i['tenant']}", limit=TENANT_LIMIT),
        tags=("demo", "quota"),
    )
    async def render_report(ctx: Context, input: dict[str, Any]) -> JSON:
        pages = await ctx.step(render, input, fairness_key=input["tenant"])
        await ctx.sleep(input["hold"])  # suspended, yet still holding its quota slot
        return pages

    return [order, ship_item, sync_store, render_report]


# ---------------------------------------------------------------- the script


@dataclass
class Progress:
    """What the script already did, saved beside the database so a rerun picks up from there."""

    elapsed: float = 0.0
    done: list[str] = field(default_factory=list)
    admitted: dict[str, dict[str, bool]] = field(default_factory=dict)  # tenant -> run id -> in
    finished: bool = False

    @property
    def accepted(self) -> dict[str, int]:
        return {tenant: sum(runs.values()) for tenant, runs in self.admitted.items()}

    @property
    def refused(self) -> dict[str, int]:
        return {tenant: sum(not v for v in runs.values()) for tenant, runs in self.admitted.items()}

    @classmethod
    def load(cls, path: Path) -> Progress:
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return cls()

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self)))
        tmp.replace(path)


class Story:
    """The script: which runs start when (in story seconds), and the approvals a human gives."""

    def __init__(self, engine: Engine, progress: Progress, speed: float, log: Log) -> None:
        self.engine = engine
        self.progress = progress
        self.speed = speed
        self.log = log
        self.waiting_since: dict[str, float] = {}
        self.approved: set[str] = set()
        self.phases: list[tuple[float, str, Callable[[], Awaitable[bool | None]]]] = [
            (0.0, "orders-1", lambda: self.start_orders(["A-1001", "A-1002"])),
            (0.0, "lanes-burst", self.lane_burst),
            (1.0, "quota-burst", lambda: self.quota_burst({"acme": range(1, 9), "globex": [1, 2]})),
            (5.0, "orders-2", lambda: self.start_orders(["A-1003", "A-1004"])),
            *[(t, f"lanes-{t:.0f}", lambda t=t: self.lane_trickle(int(t))) for t in (4.0, 8.0, 12.0, 16.0, 20.0)],
            (20.0, "quota-wave-2", self.second_wave),
        ]  # fmt: skip

    @property
    def scripted(self) -> bool:
        return all(name in self.progress.done for _, name, _ in self.phases)

    async def advance(self, elapsed: float) -> None:
        for at, name, action in self.phases:
            due = at / self.speed <= elapsed and name not in self.progress.done
            # an action that answers False is not ready yet: it is asked again on the next tick
            if due and await action() is not False:
                self.progress.done.append(name)

    def seconds(self, value: float) -> float:
        return value / self.speed

    async def start_orders(self, orders: list[str]) -> None:
        catalogue = [["mug", "tee"], ["poster", "mug", "socks"], ["hoodie"], ["tee", "cap"]]
        for name in orders:
            items = catalogue[int(name[-1]) - 1]
            spec = {
                "order": name,
                "items": items,
                "hold": self.seconds(8),
                "transit": self.seconds(4),
            }
            await self.engine.start("demo.order", spec, run_id=f"order-{name}")
            self.log(f"order {name} placed ({len(items)} items)")

    async def lane_burst(self) -> None:
        for n in range(1, 11):
            await self.engine.start(
                "demo.sync_store", {"store": "north", "n": n}, f"sync-north-{n}"
            )
        self.log("[bold]burst of 10 syncs on store:north[/]; only its lane should back up")
        await self.lane_trickle(0)

    async def lane_trickle(self, at: int) -> None:
        for lane in LANES[1:]:
            n = at // 4 + 1
            await self.engine.start("demo.sync_store", {"store": lane, "n": n}, f"sync-{lane}-{n}")

    async def quota_burst(self, plan: dict[str, Any]) -> None:
        """Each start is decided once: a burst resumed after a kill asks only for the runs it
        had not asked for yet (a start already accepted would be found by its id anyway)."""
        for tenant, numbers in plan.items():
            decided = self.progress.admitted.setdefault(tenant, {})
            outcomes = []
            for n in numbers:
                run_id = f"report-{tenant}-{n}"
                if run_id not in decided:
                    spec = {"tenant": tenant, "n": n, "hold": self.seconds(8)}
                    try:
                        await self.engine.start("demo.render_report", spec, run_id)
                        decided[run_id] = True
                    except ConcurrencyLimitError:
                        decided[run_id] = False
                outcomes.append(decided[run_id])
            accepted = sum(outcomes)
            self.log(
                f"tenant:{tenant} burst of {len(outcomes)}: {accepted} accepted,"
                f" [yellow]{len(outcomes) - accepted} refused[/]"
                f" (ConcurrencyLimitError, limit {TENANT_LIMIT})"
            )

    async def second_wave(self) -> bool:
        """acme's second wave, once its first has drained: the freed slots let all three in.
        (By the clock alone it would race the first wave's sleeps, and after a kill their
        recovery, so how many got in would depend on the machine's speed.)"""
        reports = await self.engine.list_runs(workflow="demo.render_report", limit=1000)
        if any(r.input.get("tenant") == "acme" and not r.is_terminal for r in reports):
            return False
        await self.quota_burst({"acme": range(9, 12)})
        return True

    async def approve_waiting(self, waiting: list[str]) -> None:
        """Approve each order a moment after it starts waiting, as a human would."""
        now = time.monotonic()
        for run_id in waiting:
            since = self.waiting_since.setdefault(run_id, now)
            if run_id not in self.approved and now - since >= self.seconds(2):
                await self.engine.signal(run_id, "approve", "ops@demo")
                self.approved.add(run_id)
                self.log(f"approved {run_id.removeprefix('order-')} (signal 'approve')")


def waiting_for_approval(steps: dict[str, list[Any]]) -> list[str]:
    return [
        run_id
        for run_id, records in steps.items()
        if any(r.kind == "signal" and r.status == StepStatus.PENDING for r in records)
    ]


# ---------------------------------------------------------------- running it


def demo_dir(directory: Path | None) -> Path:
    return directory if directory is not None else Path(tempfile.gettempdir()) / DEMO_DIR


def run_demo(
    directory: Path | None = None, fresh: bool = False, speed: float = 1.0, db: str | None = None
) -> int:
    """Run the demo to the end; returns the process exit code. ``db`` overrides the SQLite file."""
    from .demo_view import DemoView

    console = Console()
    folder = demo_dir(directory)
    progress = prepare(folder, fresh, console)
    url = db or f"sqlite:///{folder / 'demo.db'}"
    view = DemoView(console, url, speed, Farm())
    try:
        return asyncio.run(play(url, folder, progress, speed, view))
    except KeyboardInterrupt:
        progress.save(folder / "progress.json")
        console.print(
            "\n[bold yellow]interrupted[/]: the runs are saved in"
            f" {folder}; run [bold]runlane demo[/] again to resume them"
        )
        return 130


def prepare(folder: Path, fresh: bool, console: Console) -> Progress:
    progress = Progress.load(folder / "progress.json")
    if folder.exists() and (fresh or progress.finished):
        why = "--fresh" if fresh else "the previous demo finished"
        console.print(f"{why}: starting a new demo in {folder}")
        shutil.rmtree(folder)
        progress = Progress()
    folder.mkdir(parents=True, exist_ok=True)
    return progress


async def play(url: str, folder: Path, progress: Progress, speed: float, view: Any) -> int:
    engine = Engine(
        store=open_store(url),
        workflows=build_workflows(speed, view.event, view.farm),
        queues=[render_farm()],
        poll_interval=0.2,
        lease=4.0,
        singleton_retry=1.0,
    )
    story = Story(engine, progress, speed, view.event)
    async with engine:
        view.opening(await engine.list_runs(limit=1000), progress.elapsed)
        try:
            ok = await loop(engine, story, view, folder / "progress.json")
        except asyncio.CancelledError:
            # Ctrl-C: don't wait for singleton hand-overs to chain on through the whole backlog;
            # a turn cut short here is recovered from its lease by the next run of the demo.
            await engine.drain(timeout=2.0)
            raise
    if ok:
        progress.finished = True
        progress.save(folder / "progress.json")
    return 0 if ok else 1


async def loop(engine: Engine, story: Story, view: Any, path: Path) -> bool:
    from .demo_view import take_snapshot

    started = time.monotonic() - story.progress.elapsed
    with view:
        while True:
            elapsed = time.monotonic() - started
            story.progress.elapsed = view.elapsed = elapsed
            await story.advance(elapsed)
            snapshot = await take_snapshot(engine, elapsed)
            await story.approve_waiting(waiting_for_approval(snapshot.order_steps))
            view.update(snapshot, story.progress)
            story.progress.save(path)
            if story.scripted and snapshot.all_settled:
                view.finish(snapshot, story.progress)
                return True
            if elapsed > HARD_LIMIT / story.speed:
                view.give_up(snapshot)
                return False
            await asyncio.sleep(0.25)
