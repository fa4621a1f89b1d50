"""``runlane demo`` end to end in a subprocess, at four times the normal pace."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
DEMO = [sys.executable, "-c", "from runlane.cli import main; main()", "demo", "--speed", "4"]
COMPLETED = "completed: 4/4 orders, 8/8 shipments, 22/22 store syncs, 8/8 reports"


def run_demo(folder: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*DEMO, "--dir", str(folder), *extra], capture_output=True, text=True, timeout=90
    )


def test_the_demo_runs_every_story_to_completion_and_exits_0(tmp_path: Path) -> None:
    result = run_demo(tmp_path / "demo", "--fresh")
    assert result.returncode == 0, result.stdout + result.stderr
    out = " ".join(result.stdout.split())
    assert "starting a new story" in out
    assert COMPLETED in out
    assert "5 starts refused by the quota (ConcurrencyLimitError)" in out
    assert "approved A-1001" in out
    assert "card gateway timed out" in out
    assert "render farm: 8 reports rendered through its step queue, at most 2 at once" in out
    assert len(result.stdout.splitlines()) < 120, "non-terminal output must stay short"
    # It ends saying how to look at what it ran.
    url = f"sqlite:///{tmp_path / 'demo' / 'demo.db'}"
    assert f"runlane runs list --db {url}" in out
    assert f"runlane serve --db {url}" in out


@pytest.mark.slow
def test_make_demo_installs_the_runtime_and_not_the_development_tools(tmp_path: Path) -> None:
    venv = tmp_path / "demo-venv"
    made = subprocess.run(
        ["make", "-s", f"DEMO_VENV={venv}", f"{venv}/.installed"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    code = "import importlib.util as u, sys; print(*[m for m in sys.argv[1:] if u.find_spec(m)])"
    wanted = ["runlane", "click", "rich", "cronsim", "starlette", "uvicorn"]
    tools = ["pytest", "playwright", "schemathesis", "mypy", "ruff", "hypothesis", "mkdocs"]
    found = subprocess.run(
        [venv / "bin" / "python", "-I", "-c", code, *wanted, *tools],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert found == wanted


@pytest.mark.slow
def test_a_killed_demo_resumes_its_runs_when_run_again(tmp_path: Path) -> None:
    folder = tmp_path / "demo"
    first = subprocess.Popen(
        [*DEMO, "--dir", str(folder), "--fresh"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    time.sleep(3.0)
    first.send_signal(signal.SIGKILL)
    killed_output = first.communicate(timeout=30)[0]
    assert COMPLETED not in " ".join(killed_output.split())

    second = run_demo(folder)
    assert second.returncode == 0, second.stdout + second.stderr
    out = " ".join(second.stdout.split())
    assert "runs from a previous session" in out
    assert "resuming" in out
    assert COMPLETED in out

    third = run_demo(folder)
    assert third.returncode == 0
    assert "the previous demo finished: starting a new demo" in " ".join(third.stdout.split())
