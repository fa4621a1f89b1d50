"""Numbered schema migrations, shipped in each store package as ``sql/migrations/NNNN_description.sql``.

Each store applies the migrations newer than its database's recorded version when it opens, in
one transaction with the version bump, so a crash mid-migration leaves the old schema intact.
"""

from __future__ import annotations

import re
from importlib import resources

from ..errors import RunlaneError

_NAME = re.compile(r"^(\d{4})_[A-Za-z0-9_]+\.sql$")


def migrations(dialect: str) -> list[tuple[int, str]]:
    """Every migration of ``dialect`` (``postgres``, ``sqlite``) as ``(version, sql)``, in order."""
    folder = resources.files(__package__) / dialect / "sql" / "migrations"
    found = []
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match is not None:
            found.append((int(match.group(1)), entry.read_text(encoding="utf-8")))
    found.sort()
    _check_numbering(dialect, [version for version, _ in found])
    return found


def _check_numbering(dialect: str, versions: list[int]) -> None:
    # A gap or a duplicate means a file was misnamed; applying around it would silently skip DDL.
    if versions != list(range(1, len(versions) + 1)):
        raise RunlaneError(f"{dialect} migrations must be numbered 0001, 0002, ...: {versions}")


def pending_migrations(dialect: str, current: int) -> list[tuple[int, str]]:
    """The migrations to apply to a database at schema version ``current``.

    Raises :class:`RunlaneError` when the database is newer than this runlane knows: an older
    runlane must not write into a schema it does not understand.
    """
    known = migrations(dialect)
    latest = known[-1][0] if known else 0
    if current > latest:
        raise RunlaneError(
            f"the {dialect} database is at schema version {current}, but this runlane only"
            f" knows versions up to {latest}; upgrade runlane to use this database"
        )
    return [(version, sql) for version, sql in known if version > current]


__all__ = ["migrations", "pending_migrations"]
