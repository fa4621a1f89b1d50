"""GroupCommit, the group commit behind PostgresStore's checkpoints, on its own."""

from __future__ import annotations

import asyncio

import pytest

from runlane.stores.postgres.db import GroupCommit


class Recorder:
    """A flush that records its batches and fails the writes named ``bad``."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, batch: list[str]) -> list[Exception | None]:
        self.batches.append(batch)
        await self.gate.wait()
        await asyncio.sleep(0)
        return [ValueError(item) if item.startswith("bad") else None for item in batch]


async def test_an_idle_write_goes_alone_and_writes_meanwhile_go_together() -> None:
    flush = Recorder()
    group = GroupCommit(flush, most=3)
    await asyncio.gather(*(group(f"w{i}") for i in range(8)))
    assert flush.batches == [["w0"], ["w1", "w2", "w3"], ["w4", "w5", "w6"], ["w7"]]
    await group("later")
    assert flush.batches[-1] == ["later"]


async def test_each_write_gets_its_own_outcome() -> None:
    group = GroupCommit(Recorder(), most=10)
    outcomes = await asyncio.gather(
        *(group(item) for item in ["first", "ok", "bad-1", "ok-2"]), return_exceptions=True
    )
    assert outcomes[:2] == [None, None] and outcomes[3] is None
    assert isinstance(outcomes[2], ValueError) and str(outcomes[2]) == "bad-1"
    with pytest.raises(ValueError, match="bad-alone"):
        await group("bad-alone")


async def test_a_failed_flush_fails_its_writes_and_the_next_ones_still_go() -> None:
    calls = 0

    async def flush(batch: list[str]) -> list[Exception | None]:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0)
        if calls == 2:
            raise ConnectionError("gone")
        return [None] * len(batch)

    group = GroupCommit(flush, most=10)
    outcomes = await asyncio.gather(*(group(f"w{i}") for i in range(3)), return_exceptions=True)
    assert outcomes[0] is None
    assert all(isinstance(o, ConnectionError) for o in outcomes[1:])
    assert list(await asyncio.gather(group("a"), group("b"))) == [None, None]


async def test_a_write_whose_caller_gave_up_while_waiting_is_not_sent() -> None:
    flush = Recorder()
    flush.gate.clear()
    group = GroupCommit(flush, most=10)
    first = asyncio.create_task(group("first"))
    await asyncio.sleep(0)
    abandoned = asyncio.create_task(group("abandoned"))
    kept = asyncio.create_task(group("kept"))
    await asyncio.sleep(0)
    abandoned.cancel()
    flush.gate.set()
    await asyncio.gather(first, kept)
    assert flush.batches == [["first"], ["kept"]]
    assert abandoned.cancelled()


async def test_each_write_gets_its_own_result() -> None:
    async def flush(batch: list[str]) -> list[str | Exception]:
        await asyncio.sleep(0)
        return [item.upper() for item in batch]

    group: GroupCommit[str, str] = GroupCommit(flush, most=10)
    assert await asyncio.gather(*(group(x) for x in ["a", "b", "c"])) == ["A", "B", "C"]


async def test_load_counts_the_call_in_flight_and_the_writes_waiting() -> None:
    flush = Recorder()
    flush.gate.clear()
    group = GroupCommit(flush, most=10)
    assert group.load() == 0
    first = asyncio.ensure_future(group("w0"))
    await asyncio.sleep(0)
    assert group.load() == 1  # in flight
    more = [asyncio.ensure_future(group(f"w{i}")) for i in (1, 2)]
    await asyncio.sleep(0)
    assert group.load() == 3
    flush.gate.set()
    await asyncio.gather(first, *more)
    assert group.load() == 0
