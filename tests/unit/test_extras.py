"""Optional dependencies: the embedded engine imports none, and a missing one names its extra.

Each check runs in a clean interpreter (``python -I``), since this process has every extra
loaded already; absence is simulated by a ``sys.meta_path`` finder that refuses the packages.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runlane.errors import MissingExtraError
from runlane.extras import needs_extra

OPTIONAL = {
    "psycopg",
    "psycopg_pool",
    "redis",
    "starlette",
    "uvicorn",
    "opentelemetry",
    "cryptography",
}
EMBEDDED_APP = Path(__file__).parents[1] / "embedded_app.py"

BLOCK_OPTIONAL = f"""
import sys

class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {sorted(OPTIONAL)!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Absent())
"""

REPORT_MISSING_EXTRA = """
import json
from runlane.errors import MissingExtraError

try:
{body}
except MissingExtraError as exc:
    print(json.dumps({{"extra": exc.extra, "message": str(exc), "missing": exc.name,
                      "import_error": isinstance(exc, ImportError)}}))
"""


def python(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-I", *args], capture_output=True, text=True, timeout=60)


def without_optional_packages(code: str) -> dict[str, Any]:
    """Run ``code`` where no optional package can be imported; what it raised, as a dict."""
    body = "\n".join("    " + line for line in code.splitlines())
    result = python("-c", BLOCK_OPTIONAL + REPORT_MISSING_EXTRA.format(body=body))
    assert result.returncode == 0, result.stderr
    assert result.stdout, f"no MissingExtraError raised; stderr: {result.stderr}"
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def test_the_embedded_engine_on_sqlite_imports_no_optional_package(tmp_path: Path) -> None:
    result = python(str(EMBEDDED_APP), str(tmp_path / "embedded.db"))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["status"], report["output"]) == ("completed", {"doubled": 42})
    assert {"runlane", "click", "rich", "sqlite3"} <= set(report["modules"])
    assert OPTIONAL.isdisjoint(report["modules"])


def test_the_public_modules_import_no_optional_package() -> None:
    code = (
        "import json, sys, runlane, runlane.stores, runlane.transports, runlane.testing, runlane.cli\n"
        "import runlane.codecs, runlane.payloads\n"
        "from runlane.stores import MemoryStore, SqliteStore, open_store\n"
        "from runlane.transports import DbTransport, InProcessTransport\n"
        "from runlane.http import run_to_dict\n"
        "print(json.dumps(sorted({name.partition('.')[0] for name in sys.modules})))"
    )
    result = python("-c", code)
    assert result.returncode == 0, result.stderr
    assert OPTIONAL.isdisjoint(json.loads(result.stdout))


def test_the_test_kit_imports_pytest_only_with_a_contract_suite() -> None:
    code = (
        "import json, sys, runlane, runlane.testing\n"
        "before = 'pytest' in sys.modules\n"
        "import runlane.testing.store_contract, runlane.testing.transport_contract\n"
        "print(json.dumps([before, 'pytest' in sys.modules]))"
    )
    result = python("-c", code)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [False, True]


@pytest.mark.parametrize(
    ("code", "extra", "feature"),
    [
        ("from runlane.stores import open_store\nopen_store('postgresql://h/db')", "postgres", "PostgresStore"),
        ("from runlane.stores import PostgresStore", "postgres", "PostgresStore"),
        ("from runlane.transports import DbTransport\nDbTransport('postgresql://h/db')", "postgres", "DbTransport on PostgreSQL"),
        ("from runlane.transports import open_transport\nopen_transport('redis://h')", "redis", "RedisTransport"),
        ("from runlane.transports import RedisTransport", "redis", "RedisTransport"),
        ("from runlane.http import create_app", "http", "create_app"),
        ("from runlane.codecs import Fernet\nFernet(['k'])", "crypto", "runlane.codecs.Fernet"),
    ],
)  # fmt: skip
def test_a_backend_whose_extra_is_missing_raises_an_error_naming_the_extra(
    code: str, extra: str, feature: str
) -> None:
    report = without_optional_packages(code)
    assert report["extra"] == extra
    assert report["message"] == f"{feature} needs the {extra} extra: pip install 'runlane[{extra}]'"
    assert report["import_error"] is True
    assert report["missing"] in OPTIONAL


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["serve", "app:engine"], "runlane serve needs the http extra: pip install 'runlane[http]'"),
        (["db", "upgrade", "postgresql://h/db"], "pip install 'runlane[postgres]'"),
        (["runs", "list", "--db", "postgresql://h/db"], "pip install 'runlane[postgres]'"),
    ],
)  # fmt: skip
def test_a_command_whose_extra_is_missing_fails_in_one_line(args: list[str], message: str) -> None:
    result = python("-c", BLOCK_OPTIONAL + "from runlane.cli import main\nmain()", *args)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert message in result.stderr


def test_a_missing_module_outside_the_extra_is_not_blamed_on_it() -> None:
    with pytest.raises(ModuleNotFoundError) as raised, needs_extra("postgres", "PostgresStore"):
        import runlane_no_such_module  # type: ignore[import-not-found]  # noqa: F401
    assert not isinstance(raised.value, MissingExtraError)


def test_an_unknown_name_of_a_lazy_package_is_an_attribute_error() -> None:
    import runlane.stores

    assert not hasattr(runlane.stores, "NoSuchStore")
