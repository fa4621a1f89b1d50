"""SqliteStore: the store on one SQLite file, safe for several processes at once.

``store.py`` holds the store's methods, ``worker.py`` the connection's own thread (group
commit), ``ops.py`` the writes, ``reads.py`` the reads, ``queues.py``, ``schedules.py`` and
``retention.py`` their features, ``rows.py`` the translation between rows and records;
``sql/migrations/`` the numbered schema.
"""

from __future__ import annotations

from .store import SqliteStore

__all__ = ["SqliteStore"]
