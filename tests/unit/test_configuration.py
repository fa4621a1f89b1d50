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
        (
            "postgresql://app:s3cret@db1:5432,db2:5433/app?target_session_attrs=primary",
            "postgresql://app:***@db1:5432,db2:5433/app?target_session_attrs=primary",
        ),
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


MULTI_HOST = "postgresql://app:s3cret@10.0.0.1:5432,10.0.0.2:5433/app"


@pytest.mark.parametrize(
    ("url", "attrs"),
    [
        (MULTI_HOST, "read-write"),
        (f"{MULTI_HOST}?target_session_attrs=primary", "primary"),
        (f"{MULTI_HOST}?target_session_attrs=read-write", "read-write"),
        ("postgresql:///app?host=db1,db2&port=5432", "read-write"),
        ("host=db1,db2 dbname=app", "read-write"),
        ("postgresql://app@db:5432/app", None),
        ("postgresql://app@db/app?target_session_attrs=any", "any"),
    ],
)
def test_a_multi_host_url_reaches_only_a_primary(url: str, attrs: str | None) -> None:
    pytest.importorskip("psycopg")
    from psycopg.conninfo import conninfo_to_dict

    from runlane.urls import writable_conninfo

    params = conninfo_to_dict(writable_conninfo(url))
    assert params.get("target_session_attrs") == attrs
    assert params["dbname"] == "app"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        (f"{MULTI_HOST}?target_session_attrs=any", "target_session_attrs=any may reach a standby"),
        ("postgresql://db/app?target_session_attrs=standby", "use read-write or primary"),
        ("postgresql://db/app?target_session_attrs=prefer-standby", "may reach a standby"),
        ("postgresql://app:s3cret@db1,db2/app?port=1,2,3", r"2 host\(s\) and the ports 1,2,3"),
        ("postgresql://app:s3cret@db:port/app", "the ports port"),
        ("postgresql://app:s3cret@db/app?colour=blue", "not a PostgreSQL URL"),
    ],
)
def test_a_postgres_url_that_cannot_reach_a_primary_is_refused_at_construction(
    url: str, says: str
) -> None:
    pytest.importorskip("psycopg")
    from runlane.stores.postgres import PostgresStore
    from runlane.transports import DbTransport

    for build in (PostgresStore, DbTransport):
        with pytest.raises(ConfigurationError, match=says) as raised:
            build(url)
        assert "s3cret" not in str(raised.value)


def test_every_entry_point_takes_a_multi_host_url(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("psycopg")
    from runlane.stores.postgres import PostgresStore
    from runlane.transports import DbTransport, open_transport

    assert isinstance(open_store(MULTI_HOST), PostgresStore)
    assert isinstance(open_transport(MULTI_HOST), DbTransport)
    monkeypatch.setenv("RUNLANE_DATABASE_URL", MULTI_HOST)
    store = runlane.Engine(None).store
    assert isinstance(store, PostgresStore)
    assert repr(store) == "PostgresStore('postgresql://app:***@10.0.0.1:5432,10.0.0.2:5433/app')"
