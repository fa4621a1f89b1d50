"""PostgreSQL schema migrations: applied at open and by ``runlane db upgrade URL``."""

from __future__ import annotations

from typing import Any

import psycopg

from ...urls import writable_conninfo
from ..migrations import pending_migrations

# A session-level lock (not a transaction one): it spans every migration of the pass, so ten
# instances booting at once queue behind the first, then find the schema current.
_LOCK = "SELECT pg_advisory_lock(hashtextextended('runlane:migrate', 0))"
_UNLOCK = "SELECT pg_advisory_unlock(hashtextextended('runlane:migrate', 0))"
_HAS_VERSIONS = "SELECT to_regclass('runlane_schema_version') IS NOT NULL AS present"
_CURRENT = "SELECT coalesce(max(version), 0) AS version FROM runlane_schema_version"
_RECORD = "INSERT INTO runlane_schema_version (version) VALUES (%s)"


async def upgrade(url: str) -> int:
    """Bring the database at ``url`` to the newest schema this runlane knows; return its version.

    ``url`` may list several hosts: the migrations run on the primary. Raises ``RunlaneError``
    (and changes nothing) when the database is newer than that, ``ConfigurationError`` for a
    URL that cannot reach a primary (see ``runlane.urls.writable_conninfo``).
    """
    conninfo = writable_conninfo(url)
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        await conn.execute(_LOCK)
        try:
            return await _migrate(conn)
        finally:
            await conn.execute(_UNLOCK)


async def schema_version(conn: psycopg.AsyncConnection[Any]) -> int:
    """The version recorded in the database (0 for an empty one)."""
    cur = await conn.execute(_HAS_VERSIONS)
    present = await cur.fetchone()
    if present is None or not present[0]:
        return 0
    cur = await conn.execute(_CURRENT)
    row = await cur.fetchone()
    return int(row[0]) if row is not None else 0


async def _migrate(conn: psycopg.AsyncConnection[Any]) -> int:
    current = await schema_version(conn)
    for version, script in pending_migrations("postgres", current):
        # One transaction per migration with its version row: a crash leaves the old schema.
        async with conn.transaction():
            await conn.execute(script.encode("utf-8"))
            await conn.execute(_RECORD, [version])
        current = version
    return current


__all__ = ["schema_version", "upgrade"]
