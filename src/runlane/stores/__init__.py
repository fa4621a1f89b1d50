"""Stores: where runs, checkpoints and leases live."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..extras import lazy_names, needs_extra
from .base import Store
from .memory import MemoryStore

if TYPE_CHECKING:
    from .postgres import PostgresStore
    from .sqlite import SqliteStore


def open_store(url: str | None = None) -> Store:
    """A store for ``url`` (``memory://``, ``sqlite:///path``, ``postgresql://...``).

    Without a url, ``RUNLANE_DATABASE_URL`` is used, and memory when that is unset too.
    """
    url = url or os.environ.get("RUNLANE_DATABASE_URL") or "memory://"
    if url.startswith("memory:"):
        return MemoryStore()
    if url.startswith("sqlite:"):
        from .sqlite import SqliteStore

        return SqliteStore.from_url(url)
    if url.startswith(("postgresql:", "postgres:")):
        with needs_extra("postgres", "PostgresStore"):
            from .postgres import PostgresStore

        return PostgresStore(url)
    raise ValueError(f"unsupported store url {url!r}; use memory://, sqlite:/// or postgresql://")


# PostgresStore imports psycopg only when asked for; SqliteStore is loaded on first use too.
__getattr__ = lazy_names(
    __name__, {"SqliteStore": (".sqlite", None), "PostgresStore": (".postgres", "postgres")}
)

__all__ = ["MemoryStore", "PostgresStore", "SqliteStore", "Store", "open_store"]
