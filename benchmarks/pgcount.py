"""Client-side statement counts for psycopg, for when pg_stat_statements is not preloaded.

``count_statements()`` patches psycopg for the duration of a ``with`` block, in this process
only: every cursor ``execute``/``executemany`` counts as a statement, and every internal
command (``BEGIN``, ``COMMIT``, ``ROLLBACK``, savepoints) is tallied by its first word, and
``waits`` counts the connection's waits on its socket (``AsyncConnection.wait``): outside
pipeline mode each statement and command is one wait; a pipeline sends several per wait, so
``waits`` is the closer figure for round trips.

runlane's PostgreSQL store sends its named statements on the connection's libpq handle, past
the cursor (``runlane.stores.postgres.direct``): there each statement counts (a pipeline's
every one) and each exchange with the server is one wait. Where runlane is not installed (a
peer's venv), only psycopg is patched.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def count_statements() -> Iterator[Counter[str]]:
    import psycopg
    from psycopg import _connection_base

    counts: Counter[str] = Counter()
    base = _connection_base.BaseConnection
    originals = {
        (psycopg.AsyncCursor, "execute"): psycopg.AsyncCursor.execute,
        (psycopg.AsyncCursor, "executemany"): psycopg.AsyncCursor.executemany,
        (base, "_exec_command"): base._exec_command,
        (psycopg.AsyncConnection, "wait"): psycopg.AsyncConnection.wait,
    }

    async def execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts["statements"] += 1
        return await originals[(psycopg.AsyncCursor, "execute")](self, *args, **kwargs)

    async def executemany(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts["statements"] += 1
        return await originals[(psycopg.AsyncCursor, "executemany")](self, *args, **kwargs)

    def exec_command(self: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
        text = command.decode() if isinstance(command, bytes) else str(command)
        counts[text.split()[0].upper() if text.split() else "?"] += 1
        return originals[(base, "_exec_command")](self, command, *args, **kwargs)

    async def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts["waits"] += 1
        return await originals[(psycopg.AsyncConnection, "wait")](self, *args, **kwargs)

    patches = {
        (psycopg.AsyncCursor, "execute"): execute,
        (psycopg.AsyncCursor, "executemany"): executemany,
        (base, "_exec_command"): exec_command,
        (psycopg.AsyncConnection, "wait"): wait,
    }
    try:
        from runlane.stores.postgres import direct
    except ImportError:
        pass
    else:
        originals.update(
            {
                (direct.Direct, "run"): direct.Direct.run,
                (direct.Direct, "pipeline"): direct.Direct.pipeline,
                (direct, "_exchange"): direct._exchange,
            }
        )

        async def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            counts["statements"] += 1
            return await originals[(direct.Direct, "run")](self, *args, **kwargs)

        async def pipeline(self: Any, conn: Any, calls: Any) -> Any:
            counts["statements"] += len(calls)
            return await originals[(direct.Direct, "pipeline")](self, conn, calls)

        async def exchange(*args: Any, **kwargs: Any) -> Any:
            counts["waits"] += 1
            return await originals[(direct, "_exchange")](*args, **kwargs)

        patches.update(
            {
                (direct.Direct, "run"): run,
                (direct.Direct, "pipeline"): pipeline,
                (direct, "_exchange"): exchange,
            }
        )
    for (owner, name), fn in patches.items():
        setattr(owner, name, fn)
    try:
        yield counts
    finally:
        for (owner, name), fn in originals.items():
            setattr(owner, name, fn)
