"""The wire messages (docs/wire.md) as the engine and workers accept them: checked first.

A message comes from another process: another version, another language, a queue someone
wrote into by hand. Before anything acts on one it is checked here: a message that is not a
JSON object, lacks a field, has a field of the wrong type, or names a protocol version this
side does not speak is refused with the reason (``Malformed``); its consumer logs that, drops
it and goes on with the next. Fields the protocol does not name are ignored.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from typing import Any

from .addresses import code
from .base import Message

PROTOCOL = 1
"""The protocol version every message carries (``"protocol"``); a message without it is 1."""

WORKER_KIND = "worker"
"""A worker's descriptor, published on the heartbeat channel when it starts."""

log = logging.getLogger(__name__)

Check = Callable[[Any], bool]


class Malformed(ValueError):
    """A message that does not follow the wire protocol; the reason is the message."""


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _optional_text(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _optional_int(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


def _optional_fence(value: Any) -> bool:
    """A fencing token, or none (a sender from before fencing)."""
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0)


def _reason(value: Any) -> bool:
    return value in ("start", "wake", "timer")


def _flag(value: Any) -> bool:
    return isinstance(value, bool)


def _names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(name, str) for name in value)


def _error(value: Any) -> bool:
    return value is None or (isinstance(value, dict) and all(isinstance(k, str) for k in value))


_FIELDS: dict[str, dict[str, tuple[Check, str]]] = {
    "run": {
        "run_id": (_text, "a non-empty string"),
        "reason": (_reason, '"start", "wake" or "timer"'),
        "namespace": (_optional_text, "a string or null"),
        "workflow": (_text, "a non-empty string"),
        "version": (_text, "a non-empty string"),
        "priority": (_optional_int, "an integer or null"),
    },
    "task": {
        "step_id": (_text, "a non-empty string"),
        "run_id": (_text, "a non-empty string"),
        "seq": (_count, "a positive integer"),
        "name": (_text, "a non-empty string"),
        "attempt": (_count, "a positive integer"),
        "fence": (_optional_fence, "a non-negative integer or absent"),
    },
    "result": {
        "step_id": (_text, "a non-empty string"),
        "run_id": (_text, "a non-empty string"),
        "seq": (_count, "a positive integer"),
        "attempt": (_count, "a positive integer"),
        "ok": (_flag, "true or false"),
        "error": (_error, "an object or null"),
        "fence": (_optional_fence, "a non-negative integer or absent"),
    },
    "worker": {
        "worker": (_text, "a non-empty string"),
        "group": (_text, "a non-empty string"),
        "workflows": (_names, "a list of strings"),
        "steps": (_names, "a list of strings"),
    },
    "heartbeat": {
        "step_id": (_text, "a non-empty string"),
        "run_id": (_text, "a non-empty string"),
        "seq": (_count, "a positive integer"),
        "attempt": (_count, "a positive integer"),
        "fence": (_optional_fence, "a non-negative integer or absent"),
    },
}


def check(kind: str, message: Any) -> Message:
    """``message`` as a valid ``kind`` message (run, task, result, heartbeat, worker), or
    ``Malformed``."""
    if not isinstance(message, dict):
        raise Malformed(f"a {kind} message must be a JSON object, not {type(message).__name__}")
    version = message.get("protocol", PROTOCOL)
    if version != PROTOCOL:
        raise Malformed(f"protocol version {version!r} is not spoken here (this side: {PROTOCOL})")
    for field, (valid, expected) in _FIELDS[kind].items():
        if not valid(message.get(field)):
            raise Malformed(
                f"{kind} field {field!r} must be {expected}, got {message.get(field)!r}"
            )
    return message


def message_code(message: Message) -> str:
    """The code (``addresses.code``) of a run message: the run queue it goes to."""
    workflow, version = message.get("workflow"), message.get("version")
    if not isinstance(workflow, str) or not workflow or not isinstance(version, str) or not version:
        raise ValueError(
            f"a run message needs its run's workflow and version, got {workflow!r}, {version!r}"
        )
    return code(workflow, version)


def decode_each(payloads: Iterable[str | bytes], what: str) -> list[Any]:
    """Each payload's JSON; one that is not JSON is dropped with a logged reason (the others of
    its batch are kept: a take must not lose good messages to a bad neighbour)."""
    decoded = []
    for payload in payloads:
        try:
            decoded.append(json.loads(payload))
        except ValueError as exc:
            log.warning("dropping a %s that is not JSON (%s): %.200r", what, exc, payload)
    return decoded


__all__ = ["PROTOCOL", "Malformed", "check", "decode_each", "message_code"]
