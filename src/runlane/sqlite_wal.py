"""Switching an SQLite file to WAL mode, shared by the SQLite store and the db transport."""

from __future__ import annotations

import sqlite3
import time


def use_wal(conn: sqlite3.Connection, busy_timeout: float) -> None:
    """Switch the file to WAL mode (it stays so once switched).

    The switch needs the file to itself. When several processes open a new file at once,
    SQLite may answer "database is locked" at once instead of waiting out the busy timeout
    (waiting could deadlock two connections that both want to take the lock up), so the
    switch is tried again until the busy timeout has passed.
    """
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
        time.sleep(0.005)
