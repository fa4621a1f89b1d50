"""Small helpers shared by the engine tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from runlane import Engine, Run, StepRecord, StoreUnavailableError

if TYPE_CHECKING:
    import httpx


async def settle(engine: Engine, run_id: str, *, ticks: int = 20) -> Run:
    """Tick a drive=False engine until the run is terminal; report what it saw if it is not."""
    seen = []
    for _ in range(ticks):
        await engine.tick()
        run = await engine.get_run(run_id)
        assert run is not None, f"run {run_id} vanished"
        seen.append(run.status.value)
        if run.is_terminal:
            return run
    raise AssertionError(f"run {run_id} not terminal after {ticks} ticks; statuses seen: {seen}")


async def settled(engine: Engine, run_id: str, timeout: float = 30.0) -> Run:
    """``wait_for_run``, and on a timeout the run's stored state and steps in the failure, so a
    run that stays suspended says what it waits for."""
    try:
        return await engine.wait_for_run(run_id, timeout=timeout)
    except TimeoutError:
        run = await engine.get_run(run_id)
        steps = await engine.list_steps(run_id)
        raise AssertionError(
            f"{run_id} did not settle in {timeout}s: {run!r}; steps {steps!r}"
        ) from None


class Calls:
    """Counts how many times each named thing ran (steps must not re-execute on replay)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def hit(self, name: str) -> int:
        self.counts[name] = self.counts.get(name, 0) + 1
        return self.counts[name]

    def __getitem__(self, name: str) -> int:
        return self.counts.get(name, 0)


def kinds(steps: list[Any]) -> list[tuple[str, str]]:
    return [(s.kind, s.status) for s in steps]


async def snapshot(
    pg_url: str, steps: bool = True
) -> tuple[list[Run], dict[str, list[StepRecord]]]:
    """Every run in a PostgreSQL database (and, with ``steps``, each one's checkpoints), read by
    a store of its own, once the server answers (it may be restarting)."""
    from runlane.stores.postgres import PostgresStore

    store = PostgresStore(pg_url)
    for _ in range(100):
        try:
            await store.open()
            break
        except StoreUnavailableError:
            await asyncio.sleep(0.2)
    try:
        runs = await store.list_runs(limit=1_000_000)
        records = {r.id: await store.list_steps(r.id) for r in runs} if steps else {}
    finally:
        await store.close()
    return runs, records


def count_claims(engine: Engine) -> list[str]:
    """The ids the engine's store is asked to claim from now on, in order (the store's own
    ``claim_run`` still does the work)."""
    claims: list[str] = []
    claim_run = engine.store.claim_run

    async def counted(run_id: str, *args: Any, **kwargs: Any) -> Any:
        claims.append(run_id)
        return await claim_run(run_id, *args, **kwargs)

    engine.store.claim_run = counted  # type: ignore[method-assign]
    return claims


@contextlib.asynccontextmanager
async def api_client(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    """A client of ``engine``'s HTTP app, in process; the app leaves the engine to the test."""
    import httpx

    from runlane.http import create_app

    transport = httpx.ASGITransport(app=create_app(engine, manage_engine=False))
    async with httpx.AsyncClient(transport=transport, base_url="http://runlane") as client:
        yield client
