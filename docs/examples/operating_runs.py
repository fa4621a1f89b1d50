"""Operating runs: pause and resume, fork after a fix, deadlines, and children a cancel reaches.

One engine on a SQLite file drives the runs; each section is what an operator (or the
application) does to runs in flight, and what the runs do about it.
"""

import asyncio
import tempfile
from pathlib import Path

import runlane
from runlane import Engine, RunStatus
from runlane.stores import SqliteStore

CARD_BUG = {"fixed": False}
RESERVED: list[str] = []


@runlane.step(name="shop.reserve")
def reserve(order: str) -> str:
    RESERVED.append(order)
    return f"reserved {order}"


@runlane.step(name="shop.charge", retry=runlane.Retry(max_attempts=1))
def charge(order: str) -> str:
    if not CARD_BUG["fixed"]:
        raise RuntimeError("the card processor rejects every amount with cents")
    return f"charged {order}"


# --8<-- [start:order]
@runlane.workflow(name="order")
async def order(ctx: runlane.Context, order_id: str) -> list[str]:
    reserved = await ctx.step(reserve, order_id)  # seq 1
    approved = await ctx.wait_for_signal("approve")  # seq 2
    charged = await ctx.step(charge, order_id)  # seq 3
    return [reserved, approved, charged]


# --8<-- [end:order]


@runlane.workflow(name="report")
async def report(ctx: runlane.Context, pages: int) -> int:
    done = 0
    for page in range(pages):
        done += await ctx.step(render, page)
    return done


@runlane.step(name="report.render")
async def render(page: int) -> int:
    await asyncio.sleep(0.05)
    return 1


@runlane.workflow(name="import")
async def import_catalogue(ctx: runlane.Context, source: str) -> str:
    await ctx.wait_for_signal("file-ready")
    return f"imported {source}"


# --8<-- [start:children]
@runlane.workflow(name="audit")
async def audit(ctx: runlane.Context, account: str) -> str:
    await ctx.wait_for_signal("close")
    return f"audited {account}"


@runlane.workflow(name="close-account")
async def close_account(ctx: runlane.Context, account: str) -> str:
    # Part of the closing: cancelled with it.
    await ctx.start_child(import_catalogue, account, run_id=f"{ctx.run_id}.export")
    # Must finish whatever happens to the closing: detached.
    await ctx.start_child(audit, account, run_id=f"{ctx.run_id}.audit", detached=True)
    return str(await ctx.wait_for_signal("confirm"))


# --8<-- [end:children]


async def until(engine: Engine, run_id: str, status: RunStatus) -> runlane.Run:
    for _ in range(200):
        run = await engine.get_run(run_id)
        if run is not None and run.status == status:
            return run
        await asyncio.sleep(0.02)
    raise AssertionError(f"{run_id} never became {status}")


async def main() -> list[object]:
    store = SqliteStore(Path(tempfile.mkdtemp()) / "shop.db")
    seen: list[object] = []
    workflows = [order, report, import_catalogue, audit, close_account]
    async with Engine(store, workflows=workflows, poll_interval=0.05) as engine:
        # --8<-- [start:pause]
        await engine.start(report, 40, run_id="report-1")
        await asyncio.sleep(0.3)  # a few pages rendered
        await engine.pause("report-1")  # the page being rendered finishes, then it stops
        paused = await until(engine, "report-1", RunStatus.PAUSED)
        rendered = len(await engine.list_steps("report-1"))
        await asyncio.sleep(0.3)
        assert len(await engine.list_steps("report-1")) == rendered  # nothing runs while paused
        await engine.resume("report-1")  # it goes on from the next page
        print((await engine.wait_for_run("report-1", timeout=10)).output)  # 40
        # --8<-- [end:pause]
        seen += [paused.status, (await engine.get_run("report-1")).output]

        # --8<-- [start:fork]
        await engine.start(order, "A-17", run_id="order-A-17", attributes={"customer": "acme"})
        await engine.signal("order-A-17", "approve", "by ops")
        failed = await engine.wait_for_run("order-A-17", timeout=10)
        print(failed.status, failed.error["message"])  # failed ... rejects every amount ...

        CARD_BUG["fixed"] = True  # the fix is deployed
        fork = await engine.fork("order-A-17")  # from its first failed operation: seq 3
        print(fork.id, fork.forked_from)  # order-A-17.fork.1 ('order-A-17', 3)
        done = await engine.wait_for_run(fork.id, timeout=10)
        print(done.output)  # ['reserved A-17', 'by ops', 'charged A-17']
        # --8<-- [end:fork]
        seen += [failed.status, fork.forked_from, done.output]

        # --8<-- [start:attributes]
        acme = await engine.list_runs(attributes={"customer": "acme"})
        print([(run.id, run.status) for run in acme])  # the fork (completed), the original
        # --8<-- [end:attributes]
        seen += [[run.id for run in acme]]

        # --8<-- [start:deadline]
        late = await engine.start(
            import_catalogue, "supplier.csv", run_id="import-1", execution_timeout=0.5
        )
        print(late.deadline_at)  # half a second after its start
        timed_out = await engine.wait_for_run("import-1", timeout=10)
        print(timed_out.status, timed_out.error["type"])  # cancelled ExecutionTimeoutError
        # --8<-- [end:deadline]
        seen += [timed_out.status, timed_out.error["type"]]

        # --8<-- [start:cancel]
        await engine.start(close_account, "acct-9", run_id="close-9")
        await until(engine, "close-9.audit", RunStatus.SUSPENDED)
        await engine.cancel("close-9")
        export = await engine.wait_for_run("close-9.export", timeout=10)
        print(export.status)  # cancelled: a child is cancelled with its parent
        print((await engine.get_run("close-9.audit")).status)  # suspended: detached, it goes on
        await engine.signal("close-9.audit", "close")
        print((await engine.wait_for_run("close-9.audit", timeout=10)).output)  # audited acct-9
        # --8<-- [end:cancel]
        seen += [export.status, (await engine.get_run("close-9.audit")).output]
    assert seen == [
        RunStatus.PAUSED,
        40,
        RunStatus.FAILED,
        ("order-A-17", 3),
        ["reserved A-17", "by ops", "charged A-17"],
        ["order-A-17.fork.1", "order-A-17"],
        RunStatus.CANCELLED,
        "ExecutionTimeoutError",
        RunStatus.CANCELLED,
        "audited acct-9",
    ], seen
    assert RESERVED == ["A-17"]  # the fork reused the reservation: it ran once
    return seen


if __name__ == "__main__":
    asyncio.run(main())
