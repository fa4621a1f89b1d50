"""The SQLite store's WAL checkpoints, off the commit path.

By default SQLite checkpoints the write-ahead log inside the COMMIT that takes it past 1,000
pages: that commit copies the pages into the database file and syncs it, milliseconds during
which every store call queued behind it waits. In the 10-step latency workload that one commit
in a few hundred set the p99 (17.6 ms against a median of 8.4 on a slow day; 10.4 ms with the
checkpoints here). The store's connection defers them (``wal_autocheckpoint`` raised to
``SAFETY_PAGES``, a bound for when this thread cannot keep up); this thread, on a connection of
its own, runs a PASSIVE checkpoint after every ``every`` committed write batches (a few pages
each) or ``idle`` seconds after the last one. PASSIVE waits for nobody: the store's commits go
on while it copies, and what a reader still needs is left for the next one.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

SAFETY_PAGES = 20_000
"""The WAL size (pages) at which the store's own commit checkpoints after all."""


class WalCheckpointer:
    """A thread that checkpoints one SQLite file's WAL (see the module)."""

    def __init__(
        self, connect: Callable[[], sqlite3.Connection], *, every: int = 200, idle: float = 1.0
    ) -> None:
        self._connect = connect
        self._every = every
        self._idle = idle
        self._pending = 0  # write batches committed since the last checkpoint
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name="runlane-sqlite-wal", daemon=True)
        self._thread.start()

    def committed(self) -> None:
        """A write batch committed (called by one thread at a time)."""
        self._pending += 1
        if self._pending >= self._every:
            self._wake.set()

    def stop(self) -> None:
        """End the thread, after the checkpoint it may be running."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _main(self) -> None:
        try:
            conn = self._connect()
        except sqlite3.Error:
            log.warning(
                "WAL checkpoints: cannot connect; commits checkpoint instead", exc_info=True
            )
            return
        try:
            while not self._stopping:
                self._wake.wait(self._idle)
                self._wake.clear()
                if self._stopping or self._pending == 0:
                    continue
                self._pending = 0  # a commit counted meanwhile waits for the next round
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error:
                    log.debug("WAL checkpoint failed; the next one catches up", exc_info=True)
        finally:
            conn.close()


__all__ = ["SAFETY_PAGES", "WalCheckpointer"]
