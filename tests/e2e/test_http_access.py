"""Scoped API tokens, the audit log over HTTP, and what a server without the key shows."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet as FernetKeys

import runlane
from runlane import ConfigurationError
from runlane.codecs import Fernet
from runlane.http.auth import api_tokens
from runlane.stores.sqlite import SqliteStore
from runlane.testing import ManualClock

from .test_http_operations import client_of

TOKENS = "ops:operate:op-secret,viewer:read:read-secret"
OPS = {"Authorization": "Bearer op-secret"}
VIEWER = {"Authorization": "Bearer read-secret"}


@runlane.workflow(name="held")
async def held(ctx: runlane.Context, input: Any) -> Any:
    await ctx.wait_for_signal("go")
    return input


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[runlane.Engine]:
    built = runlane.Engine(
        store=SqliteStore(tmp_path / "access.db"),
        workflows=[held],
        clock=ManualClock(),
        drive=False,
    )
    async with built:
        yield built


@pytest.fixture
async def client(engine: runlane.Engine) -> AsyncIterator[httpx.AsyncClient]:
    async with client_of(engine, tokens=TOKENS) as client:
        yield client


async def test_a_read_token_reads_and_is_refused_every_action(
    client: httpx.AsyncClient, engine: runlane.Engine
) -> None:
    await engine.start(held, "x", "r1")
    assert (await client.get("/runs/r1", headers=VIEWER)).json()["id"] == "r1"
    refused = await client.post("/runs/r1/cancel", headers=VIEWER)
    assert refused.status_code == 403
    assert refused.json()["type"] == "forbidden" and refused.json()["token"] == "viewer"
    assert (await engine.get_run("r1")).status == "pending"  # type: ignore[union-attr]
    done = await client.post("/runs/r1/cancel", headers=OPS)
    assert done.json() == {"run_id": "r1", "cancelled": True}


async def test_whoami_names_the_callers_token_and_scope(client: httpx.AsyncClient) -> None:
    assert (await client.get("/whoami", headers=VIEWER)).json() == {
        "name": "viewer",
        "scope": "read",
    }
    assert (await client.get("/whoami", headers=OPS)).json() == {"name": "ops", "scope": "operate"}
    assert (await client.get("/whoami")).status_code == 401


async def test_every_action_is_audited_with_who_what_and_how_it_went(
    client: httpx.AsyncClient, engine: runlane.Engine
) -> None:
    started = await client.post("/runs", json={"workflow": "held", "run_id": "a1"}, headers=OPS)
    assert started.status_code == 201
    await client.post("/runs/a1/signal/go", json="now", headers=OPS)
    await client.post("/runs/a1/pause", headers=VIEWER)
    await client.post("/runs/nope/retry", headers=OPS)
    body = (await client.get("/audit", headers=VIEWER)).json()
    rows = [
        (e["actor"], e["source"], e["action"], e["run_id"], e["detail"], e["outcome"])
        for e in body["entries"]
    ]
    assert rows == [
        ("ops", "http", "retry", "nope", None, "404 run_not_found"),
        ("viewer", "http", "pause", "a1", None, "403 forbidden"),
        ("ops", "http", "signal", "a1", "go", "ok"),
        ("ops", "http", "start", "a1", None, "ok"),
    ]
    assert body["next_cursor"] is None
    assert all(e["at"] == body["entries"][0]["at"] for e in body["entries"])  # the engine's clock


async def test_the_audit_log_pages_newest_first(
    client: httpx.AsyncClient, engine: runlane.Engine
) -> None:
    for n in range(5):
        await client.post(f"/runs/r{n}/resume", headers=OPS)
    first = (await client.get("/audit", params={"limit": 2}, headers=OPS)).json()
    assert [e["run_id"] for e in first["entries"]] == ["r4", "r3"]
    rest = (await client.get("/audit", params={"cursor": first["next_cursor"]}, headers=OPS)).json()
    assert [e["run_id"] for e in rest["entries"]] == ["r2", "r1", "r0"]
    bad = await client.get("/audit", params={"cursor": "x"}, headers=OPS)
    assert (bad.status_code, bad.json()["type"]) == (422, "invalid_request")


async def test_the_single_token_of_before_operates_under_the_name_default(
    engine: runlane.Engine,
) -> None:
    async with client_of(engine, token="s3cret", tokens="") as client:
        headers = {"Authorization": "Bearer s3cret"}
        assert (await client.get("/whoami", headers=headers)).json()["name"] == "default"
        started = await client.post("/runs", json={"workflow": "held"}, headers=headers)
        assert started.status_code == 201


async def test_without_tokens_the_caller_is_anonymous_and_operates(engine: runlane.Engine) -> None:
    async with client_of(engine, tokens="") as client:
        assert (await client.get("/whoami")).json() == {"name": "anonymous", "scope": "operate"}
        await client.post("/runs/x/cancel")
        [entry] = (await client.get("/audit")).json()["entries"]
        assert (entry["actor"], entry["action"], entry["outcome"]) == (
            "anonymous",
            "cancel",
            "404 run_not_found",
        )


@pytest.mark.parametrize(
    ("tokens", "complaint"),
    [
        ("ops:admin:x", "scope read or operate"),
        ("ops:read:", "name:scope:token"),
        ("ops:read:a,ops:operate:b", "given twice"),
        ("a:read:same,b:operate:same", "another token's secret"),
    ],
)
def test_a_malformed_token_list_is_refused_at_start(tokens: str, complaint: str) -> None:
    with pytest.raises(ConfigurationError, match=complaint):
        api_tokens(None, tokens)


def test_a_token_may_hold_colons() -> None:
    accepted = api_tokens(None, "ops:operate:a:b:c")
    assert accepted is not None and accepted.find(b"Bearer a:b:c") is not None


async def test_a_server_without_the_key_shows_payloads_as_encrypted(tmp_path: Path) -> None:
    store_path = tmp_path / "secret.db"
    writer = runlane.Engine(
        store=SqliteStore(store_path),
        workflows=[held],
        drive=False,
        codec=Fernet([FernetKeys.generate_key()]),
    )
    async with writer:
        await writer.start(held, {"card": "4111"}, "s1")
        await writer.tick()
        await writer.cancel("s1")
    reader = runlane.Engine(store=SqliteStore(store_path), workflows=[held], drive=False)
    async with reader, client_of(reader, tokens="") as client:
        run = (await client.get("/runs/s1")).json()
        assert run["input"] == "encrypted"
        assert run["status"] == "cancelled"
        assert all(s["output"] in (None, "encrypted") for s in run["steps"])
        listed = (await client.get("/runs", params={"id": "s1"})).json()["runs"]
        assert listed[0]["input"] == "encrypted"
