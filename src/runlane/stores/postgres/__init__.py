"""PostgresStore: the store on PostgreSQL (``runlane[postgres]``).

``store.py`` holds the store's methods, ``db.py`` the connection pool and its retries,
``rows.py`` the translation between rows and records, ``schema.py`` the migrations runner;
``sql/queries.sql`` the named statements and ``sql/migrations/`` the numbered schema.
"""

from __future__ import annotations

from .schema import upgrade
from .store import PostgresStore

__all__ = ["PostgresStore", "upgrade"]
