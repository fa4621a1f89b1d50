"""The admission model checks out, and its checks bite (model/check.py, with spin).

The smallest configuration of `make model` must hold; each deliberate mutation of the protocol
must make spin report the property it breaks. Without spin these tests are skipped, except where
RUNLANE_REQUIRE_SPIN is set (.ci/run sets it after installing spin): there they fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CHECKER = Path(__file__).resolve().parents[2] / "model" / "check.py"

pytestmark = pytest.mark.slow  # a verifier compiled and run per test: seconds each


@pytest.fixture(autouse=True)
def _spin() -> None:
    if shutil.which("spin") is None:
        if os.environ.get("RUNLANE_REQUIRE_SPIN"):
            pytest.fail("spin is not installed (Debian: apt-get install spin)")
        pytest.skip("spin is not installed (Debian: apt-get install spin)")


def check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECKER), *args], capture_output=True, text=True, timeout=300
    )


def test_the_smallest_configuration_holds() -> None:
    result = check("--quick")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("small     ok")


@pytest.mark.parametrize(
    ("mutant", "where", "broken"),
    [
        ("fifo", "small", "fifo"),
        ("nowake", "small", "woken"),
        ("snapshot", "small", "woken"),
        ("unlocked", "small", "exclusive, fifo"),
        ("quota", "quota", "quota_kept"),
    ],
)
def test_a_mutation_of_the_protocol_is_caught(mutant: str, where: str, broken: str) -> None:
    result = check("--mutant", mutant, "--only", where)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"FAILED ({broken})" in result.stdout
    assert "counterexample:" in result.stdout  # the steps that break it, replayed
