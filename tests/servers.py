"""Servers a test starts (and restarts) itself, never the machine's own services.

``PrivatePostgres``: ``initdb`` into a temporary folder and ``pg_ctl`` on a loopback port of its
own (run as the ``postgres`` user when the tests run as root, since the server refuses root).
``ReplicatedPostgres``: a primary and a streaming standby made from it (``pg_basebackup -R``),
reached through one multi-host URL; a failover stops the primary as in a crash and promotes the
standby, and a new standby is then made from the new primary on the old one's port.
``PrivateRedis``: ``redis-server`` on a port of its own, nothing kept on disk.
``spawn_ready`` starts a fleet member as a process and waits for the ``READY`` that
``serve_until_terminated`` prints in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
"""The repository: a member started as ``python -m <module>`` from here imports ``tests``."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pg_bin(name: str) -> str:
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))), None
    )
    if found is None:
        raise RuntimeError(f"{name} is not installed")
    return found


class PrivatePostgres:
    """A PostgreSQL server of the test's own: start, stop (even abruptly), start again.

    ``settings`` go into the new cluster's ``postgresql.conf`` (a standby copied from it gets
    them too). A server made with ``initdb=False`` has no data folder until ``copy_from`` makes
    it a standby of another. ``port``: a free one by default.
    """

    def __init__(
        self,
        settings: Mapping[str, str] | None = None,
        *,
        initdb: bool = True,
        port: int | None = None,
    ) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="runlane-pg-"))
        self.data = self.root / "data"
        self.port = port or free_port()
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            shutil.chown(self.root, "postgres", "postgres")
        if initdb:
            self._run(
                _pg_bin("initdb"),
                "-D",
                str(self.data),
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
            )
            with open(self.data / "postgresql.conf", "a") as conf:
                conf.writelines(f"{name} = '{value}'\n" for name, value in (settings or {}).items())

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def create_database(self, prefix: str) -> str:
        """A new database on this server (``<prefix>_<random>``); returns its URL."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url.rsplit("/", 1)[0] + f"/{name}"

    def terminate_backends(self, database: str) -> int:
        return terminate_backends(self.url, database)

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} -c fsync=off"
        self._run(
            _pg_bin("pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.root / "log"),
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        """``fast``: a clean shutdown; ``immediate``: as a crash (recovery at the next start)."""
        self._run(_pg_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self, mode: str = "immediate") -> None:
        self.stop(mode)
        self.start()

    def copy_from(self, primary: PrivatePostgres) -> None:
        """Replace this server's data (it is stopped) with a base backup of ``primary`` that
        streams from it once started (``pg_basebackup -R``): a standby of ``primary``."""
        shutil.rmtree(self.data, ignore_errors=True)
        self._run(
            _pg_bin("pg_basebackup"),
            *("-D", str(self.data), "-R", "-X", "stream", "-c", "fast"),
            *("-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres"),
        )

    def promote(self) -> None:
        """A standby becomes a primary (``pg_ctl promote``), once it has replayed what it got."""
        self._run(_pg_bin("pg_ctl"), "-D", str(self.data), "-w", "-t", "60", "promote")

    def detach(self) -> None:
        """A standby stops receiving WAL (its upstream forgotten): what its primary commits from
        now on is not replicated, as behind a lagging or cut link."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET primary_conninfo = ''")
            conn.execute("SELECT pg_reload_conf()")

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def _run(self, *command: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if self._as_postgres else []
        subprocess.run([*prefix, *command], check=True, capture_output=True, timeout=120)

    @contextlib.contextmanager
    def aside(self) -> Iterator[str]:
        """This stopped server started on a port of its own (nothing that uses its usual port
        reaches it) for a look at its data as a crash left it: its URL; stopped afterwards."""
        port, self.port = self.port, free_port()
        try:
            self.start()
            yield self.url
        finally:
            with contextlib.suppress(subprocess.CalledProcessError):
                self.stop("immediate")
            self.port = port


SYNCHRONOUS = {"synchronous_standby_names": "*", "synchronous_commit": "on"}
"""A primary that acknowledges a commit once a standby has it on disk."""


class ReplicatedPostgres:
    """A primary and a standby streaming from it, synchronously or not, on two loopback ports
    that the URLs list both (``target_session_attrs=read-write``: a client reaches whichever is
    the primary). ``start``, ``stop``, ``terminate_backends`` act on the primary, as on a single
    server's; ``failover`` swaps the roles. The servers a failover stopped are kept, their data
    as the crash left it (``crashed``), until ``destroy``."""

    def __init__(self, synchronous: bool) -> None:
        self.synchronous = synchronous
        self.primary = PrivatePostgres(SYNCHRONOUS if synchronous else None)
        self.standby = PrivatePostgres(initdb=False)
        self.ports = (self.primary.port, self.standby.port)
        self.crashed: list[PrivatePostgres] = []

    @property
    def url(self) -> str:
        return self.database_url("postgres")

    def database_url(self, name: str) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.ports)
        return f"postgresql://postgres@{hosts}/{name}?target_session_attrs=read-write"

    def create_database(self, prefix: str) -> str:
        """A new database (``<prefix>_<random>``), on both servers; its multi-host URL."""
        url = self.primary.create_database(prefix)
        return self.database_url(url.rsplit("/", 1)[1])

    def terminate_backends(self, database: str) -> int:
        return self.primary.terminate_backends(database)

    def start(self) -> None:
        """Start the primary, and at the first start make its standby and wait for it."""
        self.primary.start()
        if not self.standby.data.exists():
            self.rebuild_standby()

    def stop(self, mode: str = "fast") -> None:
        self.primary.stop(mode)

    def failover(self) -> PrivatePostgres:
        """Stop the primary as in a crash and promote the standby; the old primary, stopped (it
        is kept in ``crashed``). Until ``rebuild_standby`` there is no standby, and a
        synchronous primary's commits wait for one."""
        old = self.primary
        old.stop("immediate")
        self.crashed.append(old)
        self.standby.promote()
        self.primary = self.standby
        self.standby = PrivatePostgres(initdb=False, port=old.port)
        return old

    def rebuild_standby(self) -> None:
        """Make the standby (where the old primary ran after a failover: the URLs stay right)
        from the primary, start it and wait until it streams."""
        self.standby.copy_from(self.primary)
        self.standby.start()
        self.wait_streaming()

    def wait_streaming(self, timeout: float = 60.0) -> None:
        """Until the primary streams to its standby (synchronously, if so made)."""
        import psycopg

        want = "sync" if self.synchronous else "async"
        deadline = time.monotonic() + timeout
        seen: list[Any] = []
        while time.monotonic() < deadline:
            with psycopg.connect(self.primary.url, autocommit=True) as conn:
                seen = conn.execute("SELECT state, sync_state FROM pg_stat_replication").fetchall()
            if ("streaming", want) in seen:
                return
            time.sleep(0.05)
        raise RuntimeError(f"the standby did not stream ({want}) in {timeout} s: {seen}")

    def wait_caught_up(self, timeout: float = 30.0) -> None:
        """Until the standby has replayed everything the primary has written so far."""
        import psycopg

        with psycopg.connect(self.primary.url, autocommit=True) as conn:
            written = conn.execute("SELECT pg_current_wal_lsn()").fetchone()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with psycopg.connect(self.standby.url, autocommit=True) as conn:
                behind = conn.execute(
                    "SELECT pg_wal_lsn_diff(%s, pg_last_wal_replay_lsn()) > 0", written
                ).fetchone()
            if behind == (False,):
                return
            time.sleep(0.02)
        raise RuntimeError(f"the standby did not replay up to {written} in {timeout} s")

    def destroy(self) -> None:
        for server in [self.primary, self.standby, *self.crashed]:
            server.destroy()


def terminate_backends(admin_url: str, database: str) -> int:
    """``pg_terminate_backend`` every connection to ``database`` (through a connection to
    ``admin_url``, which is spared); returns how many."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            (database,),
        ).fetchall()
    return len(rows)


class PrivateRedis:
    """A Redis server of the test's own, on a port of its own; ``restart`` loses every key."""

    def __init__(self) -> None:
        self.port = free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self._proc = subprocess.Popen(
            [
                "redis-server",
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server on port {self.port} did not come up")

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(10)
            self._proc = None

    def restart(self, down_for: float = 1.0) -> None:
        self.stop()
        time.sleep(down_for)
        self.start()


def spawn_ready(
    command: list[str], output: Path, timeout: float = 60.0, **popen: Any
) -> subprocess.Popen[bytes]:
    """Start ``command`` (in the repository, unless ``cwd`` says otherwise) with its stdout and
    stderr going to ``output``, and wait until it has printed ``READY`` (a file, not a pipe: a
    pipe nobody reads would stall a chatty process)."""
    popen.setdefault("cwd", REPO)
    with open(output, "ab") as sink:
        before = sink.tell()  # a restarted member may append to its predecessor's output
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, **popen)
    deadline = time.monotonic() + timeout
    while b"READY" not in output.read_bytes()[before:]:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"{command[:3]} did not start:\n{output.read_text()[-2000:]}")
        time.sleep(0.05)
    return proc


async def serve_until_terminated(member: Any) -> None:
    """Run a fleet member in its process until SIGTERM, printing ``READY`` once it is up: an
    engine drives (and drains at the end); a ``Worker`` works, then finishes its steps in flight."""
    from runlane.remote.worker import Worker

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    if isinstance(member, Worker):
        running = asyncio.create_task(member.run())
        print("READY", flush=True)
        await stop.wait()
        await member.stop()
        await running
        return
    async with member:
        print("READY", flush=True)
        await stop.wait()
