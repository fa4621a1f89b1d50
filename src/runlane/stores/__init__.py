"""Stores: where runs, checkpoints and leases live."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..errors import ConfigurationError
from ..extras import lazy_names, needs_extra
from ..urls import redact
from .base import Store
from .memory import MemoryStore

if TYPE_CHECKING:
    from .postgres import PostgresStore
    from .sqlite import SqliteStore


def open_store(url: str | None = None) -> Store:
    """A store for ``url`` (``memory://``, ``sqlite:///path``, ``postgresql://...``).

    ``sqlite:///relative/path.db`` is relative to the current folder and
    ``sqlite:////absolute/path.db`` absolute, as in SQLAlchemy. Without a url,
    ``RUNLANE_DATABASE_URL`` is used; when that is unset too, :class:`ConfigurationError`: a store
    that forgets every run at a restart (``memory://``) is only ever used when asked for by name.
    """
    url = url or os.environ.get("RUNLANE_DATABASE_URL")
    if not url:
        raise ConfigurationError(
            "no store: pass one (Engine(store=...), a URL such as sqlite:///runlane.db or "
            "postgresql://...) or set RUNLANE_DATABASE_URL; memory:// keeps runs in memory only"
        )
    if url.startswith("memory:"):
        return MemoryStore()
    if url.startswith("sqlite:"):
        from .sqlite import SqliteStore

        return SqliteStore.from_url(url)
    if url.startswith(("postgresql:", "postgres:")):
        with needs_extra("postgres", "PostgresStore"):
            from .postgres import PostgresStore

        return PostgresStore(url)
    raise ValueError(
        f"unsupported store url {redact(url)!r}; use memory://, sqlite:/// or postgresql://"
    )


# PostgresStore imports psycopg only when asked for; SqliteStore is loaded on first use too.
__getattr__ = lazy_names(
    __name__, {"SqliteStore": (".sqlite", None), "PostgresStore": (".postgres", "postgres")}
)

__all__ = ["MemoryStore", "PostgresStore", "SqliteStore", "Store", "open_store"]
