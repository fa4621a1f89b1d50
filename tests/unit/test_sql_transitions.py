"""The run lifecycle lives in ``runlane.models`` (the memory and SQLite stores apply its
transitions through ``stores/runbook.py``); the PostgreSQL store restates each transition in
SQL for its round trips. Every statement that writes a run's status names the transitions it
restates (``models.<name>``), and they exist: a change to one side finds its twin."""

from __future__ import annotations

import re

from runlane import models
from runlane.sqlfiles import read

BLOCK = re.compile(r"^-- name: (\w+)[ \t]*\n", re.MULTILINE)
# A statement that writes a run's status: an update of runlane_runs that sets it, or an insert
# of runs (their first status).
WRITES_STATUS = re.compile(
    r"UPDATE runlane_runs\b[^;]*?\bSET\b(?:(?!\bWHERE\b)[^;])*?\bstatus\s*=|INSERT INTO runlane_runs\s*\(",
    re.DOTALL,
)


def statements() -> dict[str, tuple[str, str]]:
    """Each block's comments and its code."""
    parts = BLOCK.split(read("runlane.stores.postgres", "sql", "queries.sql"))
    found = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = body.splitlines()
        comments = "\n".join(line for line in lines if line.lstrip().startswith("--"))
        code = "\n".join(line for line in lines if not line.lstrip().startswith("--"))
        found[name] = (comments, code)
    return found


def test_every_statement_writing_a_runs_status_names_its_model_twin() -> None:
    unnamed, unknown = [], []
    for name, (comments, code) in statements().items():
        if not WRITES_STATUS.search(code):
            continue
        twins = re.findall(r"models\.(\w+)", comments)
        if not twins:
            unnamed.append(name)
        unknown += [f"{name}: models.{t}" for t in twins if not hasattr(models, t)]
    assert unnamed == [] and unknown == []
