"""What the contract modules share: how a user's test module takes their tests in."""

from __future__ import annotations

import inspect
from typing import Any

import pytest


def export_tests(namespace: dict[str, Any], *fixtures: str) -> list[str]:
    """Mark a contract module's async tests for pytest-asyncio; return its ``__all__``.

    The marks are explicit so the suite runs under pytest-asyncio's strict mode (its default) as
    well as in auto mode; ``__all__`` keeps a star import to the tests and their fixtures, so the
    module's helpers never shadow names in the importing test module.
    """
    tests = [name for name in namespace if name.startswith("test_")]
    for name in tests:
        if inspect.iscoroutinefunction(namespace[name]):
            pytest.mark.asyncio(namespace[name])
    return [*fixtures, *tests]
