"""The Python side of the Node worker's example app: an engine that has none of the code.

Run `node example.js` in workers/node/ first (same Redis, same RUNLANE_PREFIX).
"""

import asyncio
import os

from runlane import Engine, RemoteWorkflow
from runlane.stores import PostgresStore
from runlane.transports import RedisTransport


def engine(database_url: str, redis_url: str, prefix: str = "runlane") -> Engine:
    return Engine(
        PostgresStore(database_url),
        transport=RedisTransport(redis_url, prefix=prefix),
        remote_workflows=[  # decided by the Node workers of group "node-wf"
            RemoteWorkflow("js-order", group="node-wf"),
            RemoteWorkflow("js-child", group="node-wf"),
        ],
    )


async def main(database_url: str, redis_url: str, prefix: str = "runlane") -> object:
    app = engine(database_url, redis_url, prefix)
    async with app:
        await app.start("js-order", {"name": "ada"}, run_id="js-1")
        while not any(  # the Node body waits for the signal "ship"
            step.kind == "signal" for step in await app.list_steps("js-1")
        ):
            await asyncio.sleep(0.1)
        await app.signal("js-1", "ship", "by sea")
        done = await app.wait_for_run("js-1", timeout=30)
    assert app.transport is not None
    await app.transport.close()  # given as an object: yours to close
    print(done.status, done.output)
    return done.output


if __name__ == "__main__":
    prefix = os.environ.get("RUNLANE_PREFIX", "runlane")
    url, redis_url = os.environ["RUNLANE_DATABASE_URL"], os.environ["RUNLANE_REDIS_URL"]
    asyncio.run(main(url, redis_url, prefix))
