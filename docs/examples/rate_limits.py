"""Limits on starts over time: refuse (rate limit), hold back (throttle), fold (debounce)."""

import asyncio

import runlane
from runlane import Debounce, Engine, RateLimit, RateLimitError
from runlane.stores import MemoryStore
from runlane.testing import ManualClock


@runlane.workflow(  # rate limit: at most 3 starts per tenant in any 60 s; refuse the rest
    name="send-sms",
    rate_limit=RateLimit(limit=3, period=60, key=lambda input: input["tenant"]),
)
async def send_sms(ctx: runlane.Context, input: dict) -> None: ...


@runlane.workflow(  # throttle: every start accepted, begun at most 2 a second per site
    name="crawl",
    rate_limit=RateLimit(limit=2, period=1, key=lambda input: input["site"], on_limit="delay"),
)
async def crawl(ctx: runlane.Context, input: dict) -> None: ...


@runlane.workflow(  # debounce: one reindex once a document's edits stop for 5 s
    name="reindex",
    debounce=Debounce(key=lambda input: input["doc"], period=5, max_wait=60),
)
async def reindex(ctx: runlane.Context, input: dict) -> int:
    return int(input["rev"])


async def main() -> None:
    clock = ManualClock()
    engine = Engine(MemoryStore(), workflows=[send_sms, crawl, reindex], clock=clock, drive=False)
    async with engine:
        for n in range(3):
            await engine.start(send_sms, {"tenant": "acme", "to": n})
        try:
            await engine.start(send_sms, {"tenant": "acme", "to": 3})
        except RateLimitError as exc:  # HTTP 429 with Retry-After
            print(f"{exc.key}: {exc.limit} per {exc.period:g}s; retry in {exc.retry_after:.0f}s")
        else:
            raise AssertionError("the rate limit let a fourth start in")

        pages = [await engine.start(crawl, {"site": "example.org", "page": n}) for n in range(5)]
        await engine.tick()
        statuses = [(await engine.get_run(page.id)).status for page in pages]
        assert statuses.count("completed") == 2, statuses  # the others wait for their second

        first = await engine.start(reindex, {"doc": "a", "rev": 1})
        clock.advance(3)
        again = await engine.start(reindex, {"doc": "a", "rev": 2})  # folded into the same run
        assert again.id == first.id
        clock.advance(5)  # 5 s after the last edit
        await engine.tick()
        assert (await engine.get_run(first.id)).output == 2  # one run, with the last input


if __name__ == "__main__":
    asyncio.run(main())
