"""Encrypted payloads and scoped access: a payment workflow whose card numbers never reach the
database in clear, a key rotation, a read-only token on the HTTP API, and the audit log.

One engine on a SQLite file; the HTTP API is called in process (httpx's ASGI transport).
"""

import asyncio
import tempfile
from pathlib import Path

import httpx
from cryptography.fernet import Fernet as FernetKeys

import runlane
from runlane import Engine
from runlane.codecs import Fernet
from runlane.http import create_app
from runlane.stores import SqliteStore


@runlane.step(name="payments.charge")
def charge(payment: dict) -> dict:
    return {"charged": payment["amount"], "card_end": payment["card"][-4:]}


@runlane.workflow(name="payment")
async def payment(ctx: runlane.Context, payment: dict) -> dict:
    return await ctx.step(charge, payment)


async def main() -> list[object]:
    path = Path(tempfile.mkdtemp()) / "payments.db"
    seen: list[object] = []

    # --8<-- [start:codec]
    old_key = FernetKeys.generate_key()  # keep keys in a secret store, not in code
    engine = Engine(SqliteStore(path), workflows=[payment], codec=Fernet([old_key]))
    async with engine:
        await engine.start(payment, {"card": "4111111111111111", "amount": 12}, "pay-1")
        done = await engine.wait_for_run("pay-1", timeout=10)
        print(done.output)  # {'charged': 12, 'card_end': '1111'}: decoded for the engine
    # --8<-- [end:codec]
    seen.append(done.output)
    assert b"4111111111111111" not in path.read_bytes()  # the file holds no card number

    # --8<-- [start:rotate]
    new_key = FernetKeys.generate_key()
    rotated = Engine(SqliteStore(path), workflows=[payment], codec=Fernet([new_key, old_key]))
    async with rotated:
        old = await rotated.get_run("pay-1")  # written under the old key, read with it
        await rotated.start(payment, {"card": "5500000000000004", "amount": 30}, "pay-2")
        await rotated.wait_for_run("pay-2", timeout=10)  # written under the new key
    # --8<-- [end:rotate]
    assert old is not None
    seen.append(old.input["amount"])

    # --8<-- [start:tokens]
    tokens = "ops:operate:op-secret,dashboard:read:read-secret"
    viewer = Engine(SqliteStore(path), workflows=[payment], drive=False)  # no key: a viewer
    app = create_app(viewer, tokens=tokens)
    transport = httpx.ASGITransport(app=app)
    async with viewer, httpx.AsyncClient(transport=transport, base_url="http://api") as http:
        read = {"Authorization": "Bearer read-secret"}
        shown = (await http.get("/runs/pay-1", headers=read)).json()
        print(shown["input"])  # encrypted: this server has no key
        refused = await http.post("/runs/pay-1/cancel", headers=read)
        print(refused.status_code, refused.json()["type"])  # 403 forbidden
        audit = (await http.get("/audit", headers=read)).json()["entries"]
        print([(e["actor"], e["action"], e["run_id"], e["outcome"]) for e in audit])
        # [('dashboard', 'cancel', 'pay-1', '403 forbidden')]
    # --8<-- [end:tokens]
    seen += [shown["input"], refused.status_code, audit[0]["outcome"]]
    assert seen == [{"charged": 12, "card_end": "1111"}, 12, "encrypted", 403, "403 forbidden"]
    return seen


if __name__ == "__main__":
    asyncio.run(main())
