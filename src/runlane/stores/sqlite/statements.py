"""The SQLite store's statements: the named blocks of ``sql/queries.sql``, read once per process.

The status sets are fragments of that file too (``{active}`` in a statement); the Python below
names them for the statements still assembled at run time.
"""

from __future__ import annotations

from ...sqlfiles import named_statements

SQL = named_statements("runlane.stores.sqlite", "sql", "queries.sql")

ACTIVE = SQL["active"]
LEASED = SQL["leased"]
WAITING = SQL["waiting"]
WAITERS = SQL["waiters"]  # a key's runs that wait their turn for a slot (never a cancelling one)
BEGUN = SQL["begun"]  # one parameter (now): a run its throttle or debounce no longer holds

__all__ = ["ACTIVE", "BEGUN", "LEASED", "SQL", "WAITERS", "WAITING"]
