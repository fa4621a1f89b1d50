"""The encoded form of a payload, of an error, of a record and of the wire's messages; the
Fernet codec's keys; and that every store method is known to carry payloads or not."""

from __future__ import annotations

import base64
import inspect
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from cryptography.fernet import Fernet as FernetKeys

from runlane import ConfigurationError
from runlane.codecs import Codec, Fernet
from runlane.errors import PayloadCodecError
from runlane.models import StepKind, StepRecord
from runlane.payloads import (
    ENCODED,
    ENCRYPTED,
    Payloads,
    encoded,
    shown,
    shown_error,
)
from runlane.stores import MemoryStore
from runlane.stores.base import Store
from runlane.stores.encoded import PASSED, EncodedStore
from runlane.transports.encoded import WireCodec


class Reversed:
    """A codec anyone can read: the bytes backwards."""

    def encode(self, data: bytes) -> bytes:
        return data[::-1]

    def decode(self, data: bytes) -> bytes:
        return data[::-1]


def test_an_encoded_payload_is_an_object_with_one_key_holding_the_codecs_bytes_in_base64() -> None:
    sealed = Payloads(Reversed()).seal({"card": "4111"})
    assert set(sealed) == {ENCODED}
    assert base64.b64decode(sealed[ENCODED]) == b'{"card":"4111"}'[::-1]
    assert Payloads(Reversed()).open(sealed, "run 'r'", "input") == {"card": "4111"}


def test_null_and_what_is_encoded_already_are_left_as_they_are() -> None:
    payloads = Payloads(Reversed())
    assert payloads.seal(None) is None
    once = payloads.seal("x")
    assert payloads.seal(once) is once


def test_a_payload_from_before_the_codec_reads_as_it_is() -> None:
    assert Payloads(Reversed()).open({"plain": 1}, "run 'r'", "input") == {"plain": 1}


def test_without_a_codec_nothing_is_encoded_and_an_encoded_payload_is_refused() -> None:
    plain = Payloads(None)
    assert plain.seal({"a": 1}) == {"a": 1}
    sealed = Payloads(Reversed()).seal("x")
    with pytest.raises(PayloadCodecError, match="run 'r': the input does not decode"):
        plain.open(sealed, "run 'r'", "input")
    assert plain.lenient().open(sealed, "run 'r'", "input") == sealed


def test_a_payload_another_key_wrote_is_an_error_naming_whose_it_is() -> None:
    sealed = Payloads(Fernet([FernetKeys.generate_key()])).seal("secret")
    other = Payloads(Fernet([FernetKeys.generate_key()]))
    with pytest.raises(PayloadCodecError) as refused:
        other.open(sealed, "run 'order-1'", "output of #3")
    assert refused.value.subject == "run 'order-1'" and refused.value.reason == "InvalidToken"
    assert str(refused.value) == "run 'order-1': the output of #3 does not decode (InvalidToken)"
    assert other.lenient().open(sealed, "run 'order-1'", "x") == sealed


def test_an_encoded_error_keeps_its_type_and_fatal_flag_in_clear() -> None:
    payloads = Payloads(Reversed())
    error = {"type": "CardDeclined", "message": "card 4111", "fatal": True, "traceback": "..."}
    sealed = payloads.seal_error(error)
    assert sealed is not None and set(sealed) == {"type", "fatal", ENCODED}
    assert sealed["type"] == "CardDeclined" and sealed["fatal"] is True
    # A store adds ``handler_error`` beside it in clear; opening keeps it.
    sealed["handler_error"] = {"type": "RateLimitError", "message": "full"}
    assert payloads.open_error(sealed, "run 'r'", "error") == {
        **error,
        "handler_error": {"type": "RateLimitError", "message": "full"},
    }


def test_a_record_keeps_in_clear_the_references_its_input_holds_unless_it_is_a_step() -> None:
    payloads = Payloads(Reversed())
    now = datetime.now(UTC)
    step = StepRecord("r", 1, "charge", StepKind.STEP, "completed", {"card": 1}, 2, None, 1, now)
    child = StepRecord("r", 2, "kid", StepKind.CHILD, "completed", {"child_id": "r.c"}, 3)
    reply = StepRecord("r", 3, "ask", StepKind.REPLY, "completed", {"update": "u1"}, "yes")
    sealed = [payloads.seal_record(r) for r in (step, child, reply)]
    assert encoded(sealed[0].input) and encoded(sealed[0].output)
    assert sealed[1].input == {"child_id": "r.c"} and encoded(sealed[1].output)
    assert sealed[2].input == {"update": "u1"} and encoded(sealed[2].output)
    assert [payloads.open_record(r) for r in sealed] == [step, child, reply]


def test_views_show_what_they_cannot_decode_as_encrypted() -> None:
    sealed = Payloads(Reversed())
    assert shown(sealed.seal([1])) == ENCRYPTED
    assert shown([1]) == [1]
    error = sealed.seal_error({"type": "E", "message": "m"})
    assert shown_error(error) == {"type": "E", "message": ENCRYPTED}


def test_fernet_encrypts_with_the_first_key_and_decrypts_with_any() -> None:
    old, new = FernetKeys.generate_key(), FernetKeys.generate_key()
    token = Fernet([old]).encode(b"data")
    rotated = Fernet([new.decode(), old])
    assert rotated.decode(token) == b"data"
    assert Fernet([new]).decode(rotated.encode(b"more")) == b"more"
    assert isinstance(rotated, Codec)
    assert "key" not in repr(rotated).replace("2 keys", "")


# A fixed key: parameters must be the same in every collecting process (pytest-xdist).
A_KEY = b"yoDXZLEJcKOhmtc9fn3tAHUNeeBsEQFIncmwSDsp9KM="


@pytest.mark.parametrize(
    ("keys", "complaint"),
    [
        ([], "a list of keys"),
        (A_KEY, "a list of keys"),
        (["not a key"], "key #1 is not a Fernet key"),
        ([A_KEY, 42], "key #2 is a int"),
    ],
    ids=["empty", "a key, not a list", "not a key", "not bytes"],
)
def test_fernet_refuses_keys_it_cannot_use(keys: Any, complaint: str) -> None:
    with pytest.raises(ConfigurationError, match=complaint):
        Fernet(keys)


def test_every_store_method_is_known_to_carry_payloads_or_not() -> None:
    protocol = {
        name
        for name, member in inspect.getmembers(Store)
        if not name.startswith("_") and (inspect.isfunction(member) or name == "atomic_admission")
    }
    protocol |= {"atomic_admission"}
    own = {name for name in vars(EncodedStore) if not name.startswith("_")}
    unknown = protocol - own - PASSED
    assert not unknown, f"say whether these carry payloads (EncodedStore or PASSED): {unknown}"
    assert not (own & PASSED)


def test_every_method_the_encoded_store_defines_takes_what_the_protocol_takes() -> None:
    # A parameter the protocol gains (a keyword such as ``fence``) must reach the inner store.
    for name, method in vars(EncodedStore).items():
        if name.startswith("_") or not hasattr(Store, name):
            continue
        ours = list(inspect.signature(method).parameters.values())
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in ours):
            continue  # forwards every keyword as it came
        theirs = list(inspect.signature(getattr(Store, name)).parameters.values())
        assert [(p.name, p.kind) for p in ours] == [(p.name, p.kind) for p in theirs], name


def test_a_store_method_not_said_to_carry_no_payload_is_refused_not_passed_in_clear(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Store, "publish_secret", lambda self: None, raising=False)
    store = EncodedStore(MemoryStore(), Payloads(Reversed()))
    with pytest.raises(AttributeError, match=r"does not say whether Store\.publish_secret"):
        store.publish_secret  # noqa: B018
    assert store.prune_runs == store.inner.prune_runs  # one said to carry none is the store's


# ---------------------------------------------------------------- the wire


def _workflow_task() -> dict[str, Any]:
    return {
        "kind": "workflow",
        "task_id": "t",
        "run_id": "r",
        "input": {"a": 1},
        "history": [
            {"seq": 1, "kind": "step", "name": "s", "input": 1, "output": 2, "error": None},
            {"seq": 2, "kind": "child", "name": "c", "input": {"child_id": "k"}, "output": 3},
        ],
        "signals": [{"id": 1, "name": "go", "payload": "now"}],
        "children": {"k": {"status": "completed", "output": 3, "error": None}},
    }


def test_a_workflow_tasks_payloads_are_sealed_and_its_references_are_not() -> None:
    wire = WireCodec(Payloads(Reversed()))
    task = _workflow_task()
    sealed = wire.seal_task(task)
    assert encoded(sealed["input"]) and encoded(sealed["history"][0]["input"])
    assert sealed["history"][1]["input"] == {"child_id": "k"}
    assert encoded(sealed["signals"][0]["payload"]) and encoded(sealed["children"]["k"]["output"])
    assert task == _workflow_task()  # the message handed in is never changed
    assert wire.open_task(sealed) == task


def test_a_decision_and_a_result_are_sealed_and_opened() -> None:
    wire = WireCodec(Payloads(Reversed()))
    decision = {
        "kind": "decision",
        "task_id": "t",
        "run_id": "r",
        "checkpoints": [{"seq": 1, "kind": "step", "name": "s", "input": 1, "output": 2}],
        "commands": [{"type": "step", "seq": 2, "input": 5}, {"type": "cancel_child"}],
        "outcome": {"type": "complete", "output": {"done": True}},
    }
    sealed = wire.seal_result(decision)
    assert encoded(sealed["commands"][0]["input"]) and encoded(sealed["outcome"]["output"])
    assert json.dumps(sealed).count(ENCODED) == 4
    assert wire.open_result(sealed) == decision
    result = {"run_id": "r", "seq": 1, "ok": False, "output": None, "error": {"type": "E"}}
    assert wire.open_result(wire.seal_result(result)) == result


def test_a_result_that_does_not_decode_is_taken_as_the_failure_it_stands_for() -> None:
    result = {"run_id": "r", "seq": 3, "ok": True, "output": "x"}
    sealed = WireCodec(Payloads(Reversed())).seal_result(result)
    taken = WireCodec(Payloads(Fernet([FernetKeys.generate_key()]))).readable_result(sealed)
    assert taken["ok"] is False and taken["error"]["type"] == "PayloadCodecError"
    assert taken["error"]["fatal"] is True and "run 'r'" in taken["error"]["message"]
