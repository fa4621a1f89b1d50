"""The one loader of named SQL blocks, for the stores and the transports."""

from __future__ import annotations

from collections.abc import Iterable

from runlane.sqlfiles import named_statements, statement


def test_a_block_loses_its_comments_indentation_and_semicolon_but_not_its_literals() -> None:
    body = "-- why this reads so\n  SELECT a, b\n  FROM t\n  WHERE c = 'x, y = z';\n"
    assert statement(body) == "SELECT a,b\nFROM t\nWHERE c='x, y = z'"


def test_a_fragment_reference_pastes_in_the_named_block_and_others_stay_as_written() -> None:
    queries = named_statements("runlane.stores.postgres", "sql", "queries.sql")
    assert queries and not any("-- " in text.splitlines()[0] for text in queries.values())
    fragments = {name for name in queries if "{" + name + "}" in "".join(queries.values())}
    assert not fragments, f"fragments left unexpanded: {fragments}"


def test_the_transports_read_their_statements_through_the_same_loader() -> None:
    assert "claim" in named_statements("runlane.transports", "sql", "sqlite_queries.sql")
    assert "claim" in named_statements("runlane.transports", "sql", "postgres_queries.sql")


def test_the_sqlite_status_fragments_name_the_statuses_the_models_give() -> None:
    from runlane.models import ACTIVE_STATUSES, RunStatus
    from runlane.stores.sqlite import statements

    def sql_set(statuses: Iterable[RunStatus]) -> str:
        return "(" + ",".join(f"'{s}'" for s in sorted(statuses)) + ")"

    assert sql_set(ACTIVE_STATUSES) == statements.ACTIVE
    assert sql_set({RunStatus.RUNNING, RunStatus.CANCELLING}) == statements.LEASED
    assert sql_set({RunStatus.SUSPENDED, RunStatus.BLOCKED}) == statements.WAITING
    # A paused run neither waits for a slot nor holds one up (it keeps one it holds).
    waiters = ACTIVE_STATUSES - {RunStatus.CANCELLING, RunStatus.PAUSED}
    assert sql_set(waiters) == statements.WAITERS
