"""runlane as a user installs it: the bare package in a fresh venv, the wheel and the sdist.

pip runs with this machine's configuration (its indexes and constraints); the fresh venvs have
no pip of their own, this environment's pip installs into them (``pip --python``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from email.parser import Parser
from pathlib import Path

import pytest

import runlane

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "src" / "runlane"
EMBEDDED_APP = ROOT / "tests" / "embedded_app.py"
OPTIONAL = ["psycopg", "psycopg_pool", "redis", "starlette", "uvicorn", "opentelemetry"]


def run(*args: str | Path, timeout: float = 120) -> str:
    result = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    assert result.returncode == 0, f"{args} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def fresh_venv(path: Path, *install: str | Path) -> Path:
    """A venv at ``path`` with only ``install`` (and its dependencies); its bin folder."""
    run(sys.executable, "-m", "venv", "--without-pip", path)
    python = path / "bin" / "python"
    run(sys.executable, "-m", "pip", "--python", python, "install", "-q", *install, timeout=240)
    return path / "bin"


def installed(bin: Path, modules: list[str]) -> list[str]:
    code = "import importlib.util, json, sys; print(json.dumps([m for m in sys.argv[1:] if importlib.util.find_spec(m)]))"
    found: list[str] = json.loads(run(bin / "python", "-I", "-c", code, *modules))
    return found


def package_data() -> list[str]:
    """Every file of the package that is not Python source: SQL, pages, scripts, py.typed."""
    files = [p for p in PACKAGE.rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc")]
    names = [str(p.relative_to(PACKAGE)) for p in files]
    console = {"http/templates/console.html", "http/static/console.css", "http/static/js/core.js"}
    assert {"py.typed", *console, "http/static/js/pages/run.js"} <= set(names)
    assert len([n for n in names if n.endswith(".sql")]) >= 9
    return names


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The sdist and the wheel built from the source tree (the wheel from the sdist)."""
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--outdir", out, ROOT, timeout=240)
    yield out


def test_the_bare_package_installs_from_source_and_runs_a_workflow_on_sqlite(
    tmp_path: Path,
) -> None:
    bin = fresh_venv(tmp_path / "venv", ROOT)
    assert installed(bin, OPTIONAL) == []
    report = json.loads(run(bin / "python", "-I", EMBEDDED_APP, tmp_path / "embedded.db"))
    assert (report["status"], report["output"]) == ("completed", {"doubled": 42})
    assert set(OPTIONAL).isdisjoint(report["modules"])


def test_the_wheel_holds_the_package_data_and_a_library_metadata(dist: Path) -> None:
    [wheel] = dist.glob("runlane-*.whl")
    info = f"runlane-{runlane.__version__}.dist-info"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = Parser().parsestr(archive.read(f"{info}/METADATA").decode())
    data = {f"runlane/{name}" for name in package_data()}
    assert data <= names, sorted(data - names)
    assert f"{info}/licenses/LICENSE" in names
    assert metadata["Version"] == runlane.__version__
    assert metadata["License-Expression"] == "Apache-2.0"
    requires = metadata.get_all("Requires-Dist") or []
    assert not [r for r in requires if "==" in r.partition(";")[0]], requires
    core = sorted(r.split(">")[0] for r in requires if "extra ==" not in r)
    # The embedded engine's own needs: the command line, and cron for schedules; the tz
    # database only where the system has none.
    assert core == ["click", "cronsim", "rich", "tzdata"]
    assert [r for r in requires if r.startswith("tzdata")] == [
        'tzdata>=2024.1; sys_platform != "linux" and sys_platform != "darwin"'
    ]
    assert {"postgres", "redis", "http", "otel", "all", "dev"} <= set(
        metadata.get_all("Provides-Extra") or []
    )


def test_the_sdist_holds_the_sources_the_package_data_and_the_project_files(dist: Path) -> None:
    [sdist] = dist.glob("runlane-*.tar.gz")
    top = f"runlane-{runlane.__version__}"
    with tarfile.open(sdist) as archive:
        names = set(archive.getnames())
    data = {f"{top}/src/runlane/{name}" for name in package_data()}
    project = ("LICENSE", "README.md", "CHANGELOG.md", "pyproject.toml")
    expected = {f"{top}/{name}" for name in project}
    assert data | expected <= names, sorted((data | expected) - names)


def test_the_built_wheel_installs_and_its_command_runs(dist: Path, tmp_path: Path) -> None:
    [wheel] = dist.glob("runlane-*.whl")
    bin = fresh_venv(tmp_path / "venv", wheel)
    assert run(
        bin / "python", "-I", "-c", "import runlane; print(runlane.__version__)"
    ).strip() == (runlane.__version__)
    commands = run(bin / "runlane", "--help").split("Commands:")[1].split()
    assert {"demo", "serve", "worker", "runs", "db"} <= set(commands)
    assert runlane.__version__ in run(bin / "runlane", "--version")
