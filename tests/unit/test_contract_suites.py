"""The contract suites stand on their own: a user's test module has only the fixtures they name.

A test in ``runlane.testing`` may ask for the suite's own fixtures, the one the user gives
(``make_store`` or ``make_transport``), pytest's built-in ones and its parametrised arguments;
a fixture of this repository's conftest (``store_kind``, ``pg_url``) would be missing there.
"""

from __future__ import annotations

import inspect
from types import ModuleType

import pytest

from runlane.testing import store_contract, transport_contract

BUILTIN = {"request", "tmp_path", "monkeypatch", "caplog", "capsys"}
GIVEN = {store_contract: {"make_store"}, transport_contract: {"make_transport"}}


def asked_for(module: ModuleType) -> dict[str, set[str]]:
    tests = {name: getattr(module, name) for name in module.__all__ if name.startswith("test_")}
    asked = {}
    for name, test in tests.items():
        params = set(inspect.signature(test).parameters)
        for mark in getattr(test, "pytestmark", []):
            if mark.name == "parametrize":
                names = mark.args[0]
                params -= set(names.split(",") if isinstance(names, str) else names)
        asked[name] = {p.strip() for p in params}
    return asked


@pytest.mark.parametrize("module", [store_contract, transport_contract], ids=lambda m: m.__name__)
def test_a_contract_test_asks_only_for_fixtures_a_user_has(module: ModuleType) -> None:
    fixtures = {name for name in module.__all__ if not name.startswith("test_")}
    allowed = fixtures | GIVEN[module] | BUILTIN
    unknown = {name: sorted(a - allowed) for name, a in asked_for(module).items() if a - allowed}
    assert not unknown, unknown


@pytest.mark.parametrize("module", [store_contract, transport_contract], ids=lambda m: m.__name__)
def test_every_async_contract_test_is_marked_for_pytest_asyncio(module: ModuleType) -> None:
    for name in module.__all__:
        test = getattr(module, name)
        if name.startswith("test_") and inspect.iscoroutinefunction(test):
            assert "asyncio" in [m.name for m in getattr(test, "pytestmark", [])], name
