"""Updates: an expense claim waits for a decision, and the approver gets the outcome back.

One engine on a SQLite file drives the claim; the approvers' calls are ``engine.update``, which
return what the workflow replies (here the payment's reference), or raise
``UpdateRejectedError`` with the workflow's reason.
"""

import asyncio
import tempfile
from pathlib import Path

import runlane
from runlane import Engine, UpdateRejectedError
from runlane.stores import SqliteStore


@runlane.step(name="expenses.pay")
def pay(claim: dict) -> str:
    return f"PAY-{claim['id']}-{claim['amount']}"


# --8<-- [start:workflow]
@runlane.workflow(name="expense")
async def expense(ctx: runlane.Context, claim: dict) -> str:
    while True:
        decision = await ctx.wait_for_update("decide")  # waits here until someone decides
        by = decision.payload["by"]
        if by == claim["employee"]:
            await ctx.reply(decision, error="nobody approves their own expense")
            continue  # the claim waits for the next decision
        if not decision.payload["approve"]:
            await ctx.reply(decision, {"status": "refused"})
            return f"refused by {by}"
        reference = await ctx.step(pay, claim)
        await ctx.reply(decision, {"status": "paid", "reference": reference})
        return f"paid by {by}"


# --8<-- [end:workflow]


async def main() -> list[object]:
    store = SqliteStore(Path(tempfile.mkdtemp()) / "expenses.db")
    seen: list[object] = []
    async with Engine(store, workflows=[expense], poll_interval=0.05) as engine:
        claim = {"id": 7, "employee": "ada", "amount": 120}
        await engine.start(expense, claim, run_id="claim-7")

        # --8<-- [start:update]
        try:
            await engine.update("claim-7", "decide", {"by": "ada", "approve": True})
        except UpdateRejectedError as rejected:
            print(rejected.message)  # nobody approves their own expense
            seen.append(rejected.message)

        outcome = await engine.update("claim-7", "decide", {"by": "bob", "approve": True})
        print(outcome)  # {'status': 'paid', 'reference': 'PAY-7-120'}
        # --8<-- [end:update]
        seen.append(outcome)

        # --8<-- [start:ended]
        done = await engine.wait_for_run("claim-7", timeout=10)
        try:  # the run has ended: no one is left to answer
            await engine.update("claim-7", "decide", {"by": "eve", "approve": False})
        except UpdateRejectedError as late:
            print(late.message)  # run 'claim-7' is already completed
            seen.append(late.message)
        # --8<-- [end:ended]
        seen.append(done.output)
    assert seen == [
        "nobody approves their own expense",
        {"status": "paid", "reference": "PAY-7-120"},
        "run 'claim-7' is already completed",
        "paid by bob",
    ], seen
    return seen


if __name__ == "__main__":
    asyncio.run(main())
