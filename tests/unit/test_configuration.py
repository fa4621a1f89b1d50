"""What a user sees of their configuration: no password anywhere, no store that is not asked for."""

from __future__ import annotations

from pathlib import Path

import pytest

import runlane
from runlane.errors import ConfigurationError, StoreUnavailableError
from runlane.stores import MemoryStore, open_store
from runlane.stores.sqlite import SqliteStore
from runlane.urls import redact


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:s3cret@db:5432/app", "postgresql://app:***@db:5432/app"),
        ("redis://:s3cret@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        (
            "postgresql://db/app?sslmode=require&password=s3cret",
            "postgresql://db/app?sslmode=require&password=***",
        ),
        ("host=db password=s3cret dbname=app", "host=db password=*** dbname=app"),
        ("postgresql://app@db/app", "postgresql://app@db/app"),
        ("sqlite:////var/lib/runlane.db", "sqlite:////var/lib/runlane.db"),
    ],
)
def test_redact_hides_the_password_of_every_url_form(url: str, shown: str) -> None:
    assert redact(url) == shown


def test_a_postgres_store_repr_shows_no_password() -> None:
    pytest.importorskip("psycopg")
    from runlane.stores.postgres import PostgresStore

    shown = repr(PostgresStore("postgresql://app:s3cret@127.0.0.1:5432/app"))
    assert "s3cret" not in shown
    assert "app:***@127.0.0.1" in shown


async def test_a_refused_postgres_connection_names_no_password() -> None:
    pytest.importorskip("psycopg")
    from runlane.stores.postgres import PostgresStore

    store = PostgresStore("postgresql://app:s3cret@127.0.0.1:1/app?connect_timeout=2")
    with pytest.raises(StoreUnavailableError) as raised:
        await store.open()
    assert "s3cret" not in str(raised.value)


def test_an_unsupported_url_error_names_no_password() -> None:
    with pytest.raises(ValueError, match=r"mysql://app:\*\*\*@db/app") as raised:
        open_store("mysql://app:s3cret@db/app")
    assert "s3cret" not in str(raised.value)


def test_an_engine_without_a_store_or_database_url_refuses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RUNLANE_DATABASE_URL", raising=False)
    with pytest.raises(ConfigurationError, match="RUNLANE_DATABASE_URL") as raised:
        runlane.Engine(None)
    assert "memory://" in str(raised.value)
    with pytest.raises(ConfigurationError):
        runlane.Engine()


def test_a_memory_store_is_had_by_asking_for_it_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUNLANE_DATABASE_URL", raising=False)
    assert isinstance(runlane.Engine("memory://").store, MemoryStore)


def test_the_database_url_from_the_environment_is_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RUNLANE_DATABASE_URL", f"sqlite:///{tmp_path}/env.db")
    store = runlane.Engine(None).store
    assert isinstance(store, SqliteStore)
    assert store.path == f"{tmp_path}/env.db"


async def test_a_sqlite_file_in_a_missing_folder_names_the_path(tmp_path: Path) -> None:
    store = SqliteStore.from_url(f"sqlite:///{tmp_path}/missing/runlane.db")
    with pytest.raises(StoreUnavailableError) as raised:
        await store.open()
    message = str(raised.value)
    assert f"{tmp_path}/missing/runlane.db" in message
    assert "sqlite:////absolute" in message
