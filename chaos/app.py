"""The chaos run's workflows, and its members as processes.

python -m chaos.app engine CONFIG     -> an engine instance (PostgreSQL, RedisTransport), until SIGTERM
python -m chaos.app worker CONFIG     -> a remote step and workflow-turn worker, until SIGTERM
python -m chaos.app producer CONFIG   -> the workload's producer (see chaos.workload), until done

``RUNLANE_CHAOS_RELEASE`` (``1`` by default) is the code a member runs: the "deploy" fault
restarts a member on release 2, which patches ``c.plain`` and the remote workflow ``c.rwf``
(``ctx.patched(DEPLOY_PATCH)``: one local step more), registers a version 2 of ``c.leaf``
(the fans of a release-2 engine start it: it starts a ``c.fresh`` child) and ``c.fresh``, a
workflow only release 2 has.

Every step execution appends one line to its process's side-effect log (``effects-<pid>.log``):
``<run> <label> <pid> <kind> <lane> <start> <end> <token>``. ``label`` names the step within its
run, ``lane`` is ``s:<key>`` (a singleton key, limit 1), ``c:<key>`` (a quota key), ``q:<name>``
(a step queue: the execution was admitted by it) or ``-``, the
times are wall-clock seconds, and ``token`` is the step's output: each execution returns a token
of its own, so the checker can tell which execution's result a run recorded and consumed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import runlane
from runlane import (
    Concurrency,
    Debounce,
    Engine,
    FatalError,
    RateLimit,
    Retry,
    Singleton,
    StepQueue,
)
from runlane.remote.worker import Worker
from runlane.stores.postgres import PostgresStore
from runlane.transports import RedisTransport
from tests.servers import serve_until_terminated

from .config import GROUP, LEASE, Config

QUOTA_LIMIT = 2
RELEASE = os.environ.get("RUNLANE_CHAOS_RELEASE", "1")
"""The release of the code this process runs (see the module's docstring)."""
DEPLOY_PATCH = "chaos-deploy"

# Step queues with little room, so that steps wait for it: ``cq.slots`` admits local and remote
# steps two at a time; ``cq.metered`` at most 4 per fixed 1 s window, 3 at a time, fair across
# tenants, with priorities.
SLOTS = StepQueue("cq.slots", concurrency=2)
METERED = StepQueue(
    "cq.metered", concurrency=3, rate_limit=RateLimit(limit=4, period=1.0), fairness="key"
)
QUEUES = {q.name: q for q in (SLOTS, METERED)}

# Run-level flow control, per key: refuse over 2 starts in any 4 s; begin at most 2 in any
# 2 s (a throttle); fold starts 0.5 s apart into one run, begun at most 2 s after the first.
LIMITED = RateLimit(limit=2, period=4.0, key=lambda i: str(i["key"]))
THROTTLED = RateLimit(limit=2, period=2.0, key=lambda i: str(i["key"]), on_limit="delay")
DEBOUNCED = Debounce(key=lambda i: str(i["key"]), period=0.5, max_wait=2.0)
DOOMED = "doomed by the workload"
"""The message of the one failure the workload causes on purpose."""


class WorkloadFailure(FatalError):
    """A step that fails on purpose: the workload's own verdict, never retried."""


class _Effects:
    """This process's side-effect log: one ``write`` (one line, O_APPEND) per execution."""

    def __init__(self) -> None:
        self.dir: Path | None = None
        self._fd: int | None = None

    def append(self, line: str) -> None:
        if self._fd is None:
            if self.dir is None:
                raise RuntimeError("the side-effect log has no folder")
            path = self.dir / f"effects-{os.getpid()}.log"
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(self._fd, line.encode())


EFFECTS = _Effects()


async def _effect(args: list[Any], kind: str, seconds: float) -> str:
    run_id, label, lane = args
    start = time.time()
    await asyncio.sleep(seconds)
    token = uuid.uuid4().hex[:12]
    EFFECTS.append(
        f"{run_id} {label} {os.getpid()} {kind} {lane} {start:.6f} {time.time():.6f} {token}\n"
    )
    return token


# A step inside a lane lasts longer: a frozen or killed engine is then often mid-step in a
# singleton or quota body, where a second execution would do the most harm.
@runlane.step(name="c.local")
async def local(args: list[Any]) -> str:
    return await _effect(args, "local", 0.05 if args[2] == "-" else 0.2)


@runlane.step(name="c.remote", group=GROUP, retry=Retry(max_attempts=5, backoff=0.2))
async def remote(args: list[Any]) -> str:
    return await _effect(args, "remote", 0.05)


# The dead-worker window: a killed worker's attempt is retried after 3 s of silence.
@runlane.step(name="c.remote_t", group=GROUP, timeout=3.0, retry=Retry(max_attempts=8, backoff=0.2))
async def remote_timed(args: list[Any]) -> str:
    return await _effect(args, "remote_t", 0.05)


@runlane.step(name="c.doom")
async def doom(args: list[Any]) -> str:
    await _effect(args, "doom", 0.01)
    raise WorkloadFailure(DOOMED)


def _step(ctx: runlane.Context, fn: Any, label: str, lane: str = "-") -> Any:
    return ctx.step(fn, [ctx.run_id, label, lane])


async def _tokens(ctx: runlane.Context, labels: str, lane: str = "-") -> dict[str, str]:
    return {label: await _step(ctx, local, label, lane) for label in labels}


@runlane.workflow(name="c.plain")
async def plain(ctx: runlane.Context, _: Any) -> dict[str, Any]:
    return {"tokens": await _tokens(ctx, "abc")}


@runlane.workflow(name="c.plain")
async def plain_2(ctx: runlane.Context, _: Any) -> dict[str, Any]:
    """Release 2's ``c.plain``: a run that reaches the patch on this code runs a step more."""
    extra = {"p": await _step(ctx, local, "p")} if ctx.patched(DEPLOY_PATCH) else {}
    return {"tokens": {**extra, **await _tokens(ctx, "abc")}}


@runlane.workflow(name="c.sleepy")
async def sleepy(ctx: runlane.Context, input: Any) -> dict[str, Any]:
    first = await _tokens(ctx, "a")
    await ctx.sleep(float(input["sleep"]))
    return {"tokens": {**first, **await _tokens(ctx, "b")}}


@runlane.workflow(name="c.signal")
async def signalled(ctx: runlane.Context, _: Any) -> dict[str, Any]:
    first = await _tokens(ctx, "a")
    payload = await ctx.wait_for_signal("go")
    return {"tokens": {**first, **await _tokens(ctx, "b")}, "signal": payload}


@runlane.workflow(name="c.remote")
async def remote_steps(ctx: runlane.Context, _: Any) -> dict[str, Any]:
    tokens = await _tokens(ctx, "a")
    tokens["r"] = await _step(ctx, remote, "r")
    tokens["t"] = await _step(ctx, remote_timed, "t")
    return {"tokens": {**tokens, **await _tokens(ctx, "b")}}


# A remote workflow: the engines never run its body; each turn goes to a worker process of the
# group, which replays it and runs its local steps (their effects carry the worker's pid). The
# remote step goes back through the engine to a worker; the last turn runs two local steps.
@runlane.workflow(name="c.rwf", group=GROUP)
async def remote_workflow(ctx: runlane.Context, input: Any) -> dict[str, Any]:
    tokens = await _tokens(ctx, "a")
    tokens["r"] = await _step(ctx, remote, "r")
    await ctx.sleep(float(input["sleep"]))
    payload = await ctx.wait_for_signal("go")
    return {"tokens": {**tokens, **await _tokens(ctx, "bc")}, "signal": payload}


@runlane.workflow(name="c.leaf")
async def leaf(ctx: runlane.Context, _: Any) -> dict[str, Any]:
    return {"tokens": await _tokens(ctx, "a")}


@runlane.workflow(name="c.fresh")
async def fresh(ctx: runlane.Context, _: Any) -> dict[str, Any]:
    """A workflow only release 2 has: an engine of release 1 must never claim it."""
    return {"tokens": await _tokens(ctx, "a")}


@runlane.workflow(name="c.leaf", version="2")
async def leaf_2(ctx: runlane.Context, _: Any) -> dict[str, Any]:
    """Release 2's new version of ``c.leaf``, started by the fans of a release-2 engine."""
    tokens = await _tokens(ctx, "a")
    await ctx.start_child(fresh, {})
    return {"tokens": tokens}


@runlane.workflow(name="c.rwf", group=GROUP)
async def remote_workflow_2(ctx: runlane.Context, input: Any) -> dict[str, Any]:
    """Release 2's ``c.rwf`` (on the workers): patched like ``c.plain``."""
    tokens = await _tokens(ctx, "a")
    if ctx.patched(DEPLOY_PATCH):
        tokens["p"] = await _step(ctx, local, "p")
    tokens["r"] = await _step(ctx, remote, "r")
    await ctx.sleep(float(input["sleep"]))
    payload = await ctx.wait_for_signal("go")
    return {"tokens": {**tokens, **await _tokens(ctx, "bc")}, "signal": payload}


@runlane.workflow(name="c.fan")
async def fan(ctx: runlane.Context, input: Any) -> dict[str, Any]:
    children = await ctx.all([ctx.child(leaf, {"i": i}) for i in range(int(input["width"]))])
    return {"tokens": await _tokens(ctx, "a"), "children": children}


@runlane.workflow(name="c.chain")
async def chain(ctx: runlane.Context, input: Any) -> dict[str, Any]:
    tokens = await _tokens(ctx, "a")
    if input["left"] > 0:
        ctx.continue_as_new({**input, "left": input["left"] - 1})
    return {"tokens": {**tokens, **await _tokens(ctx, "b")}}


def _key(input: Any) -> str:
    return str(input["key"])


async def _gated(
    ctx: runlane.Context, lane: str, sleep: float, remote_step: Any = None
) -> dict[str, Any]:
    """A gated run's body, all of it inside its lane: a step, a remote step (labelled ``r``
    without a timeout, ``t`` with one), a durable sleep, a step."""
    tokens = await _tokens(ctx, "a", lane)
    if remote_step is not None:
        label = "t" if remote_step is remote_timed else "r"
        tokens[label] = await _step(ctx, remote_step, label, lane)
    await ctx.sleep(sleep)
    return {"tokens": {**tokens, **await _tokens(ctx, "b", lane)}}


@runlane.workflow(name="c.queue", singleton=Singleton(key=_key, on_busy="queue"))
async def queued(ctx: runlane.Context, input: Any) -> dict[str, Any]:
    return await _gated(ctx, f"s:queue:{input['key']}", 0.5, remote)


@runlane.workflow(name="c.reject", singleton=Singleton(key=_key, on_busy="reject"))
async def rejecting(ctx: runlane.Context, input: Any) -> dict[str, Any]:
    return await _gated(ctx, f"s:reject:{input['key']}", 0.5, remote_timed)


# Local steps only: cancelling a run suspended on a remote step frees its slot while a worker
# may still be executing that step (a cancelled run's step in flight finishes, as documented).
@runlane.workflow(name="c.replace", singleton=Singleton(key=_key, on_busy="replace"))
async def replacing(ctx: runlane.Context, input: Any) -> dict[str, Any]:
    return await _gated(ctx, f"s:replace:{input['key']}", 1.0)


@runlane.workflow(name="c.quota", concurrency=Concurrency(key=_key, limit=QUOTA_LIMIT))
async def quota(ctx: runlane.Context, input: Any) -> dict[str, Any]:
    return await _gated(ctx, f"c:{input['key']}", 1.5, remote)


def _queued(ctx: runlane.Context, fn: Any, label: str, queue: StepQueue, **options: Any) -> Any:
    """A step admitted by ``queue`` (named per call), logged in its lane ``q:<name>``."""
    return ctx.step(fn, [ctx.run_id, label, f"q:{queue.name}"], queue=queue.name, **options)


@runlane.workflow(name="c.stepq")
async def stepq(ctx: runlane.Context, _: Any) -> dict[str, Any]:
    """Three local steps at once and a remote step, through a queue of two slots."""
    local_tokens = await ctx.all([_queued(ctx, local, label, SLOTS) for label in "abc"])
    tokens = dict(zip("abc", local_tokens, strict=True))
    tokens["r"] = await _queued(ctx, remote, "r", SLOTS)
    return {"tokens": tokens}


@runlane.workflow(name="c.metered")
async def metered(ctx: runlane.Context, input: Any) -> dict[str, Any]:
    """Two local steps at once and a remote step with a timeout through a rate-limited queue,
    with the run's priority and its tenant as fairness key."""
    options = {"priority": int(input["priority"]), "fairness_key": str(input["tenant"])}
    local_tokens = await ctx.all([_queued(ctx, local, x, METERED, **options) for x in "ab"])
    tokens = dict(zip("ab", local_tokens, strict=True))
    tokens["t"] = await _queued(ctx, remote_timed, "t", METERED, **options)
    return {"tokens": tokens}


@runlane.workflow(name="c.limited", rate_limit=LIMITED)
async def limited(ctx: runlane.Context, _: Any) -> dict[str, Any]:
    return {"tokens": await _tokens(ctx, "a")}


@runlane.workflow(name="c.throttled", rate_limit=THROTTLED)
async def throttled(ctx: runlane.Context, _: Any) -> dict[str, Any]:
    return {"tokens": await _tokens(ctx, "a")}


@runlane.workflow(name="c.debounced", debounce=DEBOUNCED)
async def debounced(ctx: runlane.Context, input: Any) -> dict[str, Any]:
    """Its output shows the input it ran with: the last start folded into it."""
    return {"tokens": await _tokens(ctx, "a"), "seen": input}


@runlane.workflow(name="c.desk")
async def desk(ctx: runlane.Context, _: Any) -> dict[str, Any]:
    """Answers one update: a step, then the reply (the step's token and the update's payload)."""
    update = await ctx.wait_for_update("ask")
    token = await _step(ctx, local, "a")
    await ctx.reply(update, {"token": token, "payload": update.payload})
    return {"tokens": {"a": token}, "asked": update.payload}


@runlane.workflow(name="c.doomed")
async def doomed(ctx: runlane.Context, _: Any) -> dict[str, Any]:
    tokens = await _tokens(ctx, "a")
    await _step(ctx, doom, "d")
    return {"tokens": tokens}


WORKFLOWS = [
    plain,
    sleepy,
    signalled,
    remote_steps,
    remote_workflow,
    leaf,
    fan,
    chain,
    queued,
    rejecting,
    replacing,
    quota,
    doomed,
    desk,
    stepq,
    metered,
    limited,
    throttled,
    debounced,
]
STEPS = [local, remote, remote_timed, doom]
RELEASES = {
    "1": WORKFLOWS,
    "2": [plain_2 if w is plain else w for w in WORKFLOWS] + [leaf_2, fresh],
}
REMOTE_BODIES = {"1": remote_workflow, "2": remote_workflow_2}


def engine(config: Config, **options: Any) -> Engine:
    return Engine(
        PostgresStore(config.pg_url),
        transport=RedisTransport(config.redis_url, prefix=config.prefix),
        workflows=RELEASES[RELEASE],
        steps=STEPS,
        queues=list(QUEUES.values()),
        **options,
    )


def worker(config: Config) -> Worker:
    transport = RedisTransport(config.redis_url, prefix=config.prefix)
    body = REMOTE_BODIES[RELEASE]
    return Worker(GROUP, transport, steps=STEPS, workflows=[body], heartbeat_interval=0.3)


async def serve(role: str, config: Config) -> None:
    EFFECTS.dir = config.root
    if role == "producer":
        from .workload import produce

        await produce(config, engine(config, drive=False, consumers="never"))
    elif role == "worker":
        await serve_until_terminated(worker(config))
    else:
        # A remote task nobody took (dropped, or lost with a restarted Redis) is sent again
        # after 3 s, not after the reconcile interval.
        member = engine(config, lease=LEASE, poll_interval=0.2, remote_redispatch=3.0)
        await serve_until_terminated(member)


if __name__ == "__main__":
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(process)d %(name)s %(message)s"
    )
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    asyncio.run(serve(sys.argv[1], Config.load(sys.argv[2])))
