"""The db transport's SQL, kept in ``sql/*.sql`` files and read once per process."""

from __future__ import annotations

import functools
import re
from importlib import resources

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def schema(dialect: str) -> str:
    return _read(f"{dialect}.sql")


@functools.cache
def queries(dialect: str) -> dict[str, str]:
    """Named queries of ``sql/<dialect>_queries.sql``: blocks headed ``-- name: <name>``."""
    parts = _NAME.split(_read(f"{dialect}_queries.sql"))
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def _read(filename: str) -> str:
    return (resources.files(__package__) / "sql" / filename).read_text(encoding="utf-8")


__all__ = ["queries", "schema"]
