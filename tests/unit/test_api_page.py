"""The hand-written API page (docs/reference/api.md) names every public name and places every
field of ``Run`` on one side of the boundary: a name added to the API, or a field added to the
run, fails here until the page says what it is."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import runlane
import runlane.stores
import runlane.testing
import runlane.transports
from runlane import Run

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "api.md").read_text()


def test_every_public_name_is_on_the_page() -> None:
    modules = (runlane, runlane.stores, runlane.transports, runlane.testing)
    names = {name for module in modules for name in module.__all__}
    missing = sorted(name for name in names if not re.search(rf"\b{name}\b", PAGE))
    assert missing == []


def test_every_field_of_a_run_is_public_or_internal_on_the_page_and_not_both() -> None:
    public = PAGE.split("Public fields:")[1].split("Internal")[0]
    internal = PAGE.split("Internal (what the stores need")[1].split("## Errors")[0]
    for field in fields(Run):
        marked = f"`{field.name}`"
        assert (marked in public) != (marked in internal), field.name
