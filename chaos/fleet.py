"""The fleet: engine and worker processes the injector kills, freezes and restarts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.servers import spawn_ready

STOP_TIMEOUT = 30.0


@dataclass
class Fleet:
    config: Path  # the run's config file
    root: Path  # where each member's output goes
    members: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    # Members found exited that nobody stopped: name, pid, exit code.
    died: list[tuple[str, int, int]] = field(default_factory=list)
    # The release of the code each member runs (``chaos.app``; a deploy moves it to "2"), and
    # of each process ever started (the checker holds each execution to its process's code).
    releases: dict[str, str] = field(default_factory=dict)
    release_of: dict[int, str] = field(default_factory=dict)

    def spawn(self, name: str) -> int:
        role = name.split("-", 1)[0]
        release = self.releases.setdefault(name, "1")
        command = [sys.executable, "-m", "chaos.app", role, str(self.config)]
        env = {**os.environ, "RUNLANE_CHAOS_RELEASE": release}
        self.members[name] = spawn_ready(command, self.root / f"{name}.out", env=env)
        self.release_of[self.members[name].pid] = release
        return self.members[name].pid

    def start(self, engines: int, workers: int) -> None:
        for name in [f"engine-{i}" for i in range(engines)] + [
            f"worker-{i}" for i in range(workers)
        ]:
            self.spawn(name)

    def names(self, role: str) -> list[str]:
        return sorted(name for name in self.members if name.startswith(role))

    def kill(self, name: str) -> tuple[int, int]:
        """SIGKILL a member and start it again: the old pid and the new one."""
        proc = self.members[name]
        proc.kill()
        proc.wait()
        return proc.pid, self.spawn(name)

    def deploy(self, name: str, release: str) -> tuple[int, int]:
        """A member stopped as a deploy stops it (SIGTERM: it drains) and started again on
        ``release``: the old pid and the new one. One that does not stop in time is killed,
        and counted among the members that hung on SIGTERM."""
        proc = self.members[name]
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            self.died.append((name, proc.pid, -9))
        self.releases[name] = release
        return proc.pid, self.spawn(name)

    def freeze(self, name: str, seconds: float) -> tuple[int, float, float]:
        """SIGSTOP a member for ``seconds``, then SIGCONT: its pid and the window (wall clock)."""
        proc = self.members[name]
        stopped = time.time()
        proc.send_signal(signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            proc.send_signal(signal.SIGCONT)
        return proc.pid, stopped, time.time()

    def dead(self) -> list[str]:
        """Members that exited by themselves (noted in ``died``: that is a failure)."""
        gone = []
        for name, proc in self.members.items():
            code = proc.poll()
            if code is not None and all(pid != proc.pid for _, pid, _ in self.died):
                self.died.append((name, proc.pid, code))
                gone.append(name)
        return gone

    def revive_the_dead(self) -> None:
        for name in self.dead():
            self.spawn(name)

    def stop(self) -> None:
        self.dead()
        for proc in self.members.values():
            if proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for name, proc in self.members.items():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                self.died.append((name, proc.pid, -9))  # a drain that never ended
