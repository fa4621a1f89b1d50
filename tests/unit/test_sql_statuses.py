"""Every status set the stores' SQL names comes from one named fragment, so a status added to
the lifecycle (``paused``) is added in one place per store, and each fragment says the same as
the Python set it stands for."""

from __future__ import annotations

import re

import pytest

from runlane.models import ACTIVE_STATUSES, TERMINAL_STATUSES, RunStatus
from runlane.sqlfiles import read

STATUS = "|".join(s.value for s in RunStatus)
LIST = re.compile(rf"\(\s*'(?:{STATUS})'(?:\s*,\s*'(?:{STATUS})')*\s*\)")
BLOCK = re.compile(r"^-- name: (\w+)[ \t]*\n", re.MULTILINE)
STORES = ["postgres", "sqlite"]


def blocks(store: str) -> dict[str, str]:
    text = read(f"runlane.stores.{store}", "sql", "queries.sql")
    parts = BLOCK.split(text)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def fragment_sets(store: str) -> dict[str, frozenset[str]]:
    """The fragments that are a status list and nothing else, as sets."""
    found = {}
    for name, body in blocks(store).items():
        code = "\n".join(line for line in body.splitlines() if not line.startswith("--")).strip()
        if LIST.fullmatch(code):
            found[name] = frozenset(re.findall(r"'(\w+)'", code))
    return found


@pytest.mark.parametrize("store", STORES)
def test_every_status_list_in_a_statement_is_a_named_fragment(store: str) -> None:
    fragments = fragment_sets(store)
    literal = [
        (name, match)
        for name, body in blocks(store).items()
        if name not in fragments
        for match in LIST.findall(body)
    ]
    assert literal == []


@pytest.mark.parametrize("store", STORES)
def test_the_lifecycle_fragments_match_the_python_sets(store: str) -> None:
    fragments = fragment_sets(store)
    assert fragments["active"] == {s.value for s in ACTIVE_STATUSES}
    assert fragments["terminal"] == {s.value for s in TERMINAL_STATUSES}
    assert fragments["leased"] == {"running", "cancelling"}
    assert fragments["waiting"] == {"suspended", "blocked"}
    assert fragments["waiters"] == fragments["active"] - {"paused", "cancelling"}
