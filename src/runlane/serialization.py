"""JSON values in and out of the store, checked at the boundary.

Every value runlane stores (a run's input and output, a signal or event payload, a step's input
and result) is checked where it enters, before anything is written: it must be JSON (dict with
string keys, list, str, int, float, bool, None; no NaN or infinity), nest at most ``MAX_DEPTH``
levels (a cycle never ends, so it is refused the same way), be encodable as UTF-8 (no lone
surrogates) and take at most ``MAX_PAYLOAD_BYTES`` as JSON text; an object may not have the key ``$encoded``
at its top (the envelope of an encoded payload). Anything else raises
``SerializationError`` naming where the offending value is.
"""

from __future__ import annotations

import json
import math
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

from .errors import SerializationError

MAX_PAYLOAD_BYTES = 4 * 1024 * 1024
"""The largest value runlane stores, in bytes of UTF-8 JSON text (4 MiB)."""

MAX_DEPTH = 100
"""How many levels lists and dicts may nest inside a value."""

ENCODED = "$encoded"
"""The key of an encoded payload's envelope (see ``runlane.payloads``): no value runlane stores
may be an object with this key at its top, or it would read as encoded."""


def check_json(value: Any, what: str = "value") -> Any:
    """Return ``value`` unchanged if it is a JSON value, else raise SerializationError."""
    try:
        _check(value, 0)
    except _Refused as refused:
        raise SerializationError(f"{what}{refused.path} {refused}") from None
    return value


class _Refused(Exception):
    """Where ``_check`` refused a value: the path is named on the way out, one level per
    frame, so a value that passes builds none (naming each item's path as the walk went cost
    three times the value's encoding)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.path = ""

    def inside(self, step: str) -> _Refused:
        self.path = step + self.path
        return self


_PLAIN = frozenset((str, int, bool))


def _check(value: Any, depth: int) -> None:
    if value is None or isinstance(value, bool | int | str):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Refused(f"is {value!r}, which JSON cannot represent")
        return
    if depth >= MAX_DEPTH and isinstance(value, list | tuple | dict):
        raise _Refused(f"nests deeper than {MAX_DEPTH} levels (or holds a reference to itself)")
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            if type(item) not in _PLAIN and item is not None:
                try:
                    _check(item, depth + 1)
                except _Refused as refused:
                    raise refused.inside(f"[{i}]") from None
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Refused(f"has a non-string key {key!r}")
            if type(item) not in _PLAIN and item is not None:
                try:
                    _check(item, depth + 1)
                except _Refused as refused:
                    raise refused.inside(f"[{key!r}]") from None
        return
    raise _Refused(
        f"is a {type(value).__name__}, which is not JSON-serialisable"
        " (use dict, list, str, int, float, bool or None)"
    )


# Where the C encoder is missing (not CPython): one encoder for every call, since
# ``json.dumps`` with options builds a new one each time.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _unserialisable(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# The C encoder ``_ENCODER`` makes afresh at every call (it binds the call's own table of the
# containers it is inside, to detect a cycle), made once: the values written are checked
# already, and a cycle ends in RecursionError, reported as the ValueError the table would raise.
_C_ENCODER = (
    None
    if c_make_encoder is None
    else c_make_encoder(
        None, _unserialisable, encode_basestring, None, ":", ",", False, False, False
    )
)


def dumps(value: Any) -> str:
    """``value`` as compact JSON text (not ASCII-escaped; NaN and infinities refused)."""
    kind = type(value)
    if kind is str:
        return encode_basestring(value)
    if kind is int:
        return int.__repr__(value)
    if _C_ENCODER is None:
        return _ENCODER.encode(value)
    try:
        return "".join(_C_ENCODER(value, 0))
    except RecursionError:
        raise ValueError("Circular reference detected (or a value nested too deep)") from None


def loads(text: str | bytes | None) -> Any:
    return None if text is None else json.loads(text)


def normalise(value: Any, what: str = "value") -> Any:
    """Check a value at the boundary and round-trip it through JSON, so it comes back exactly as
    a replay would read it (tuples as lists)."""
    check_json(value, what)
    if type(value) is dict and ENCODED in value:
        raise SerializationError(
            f"{what} has the key {ENCODED!r}, which runlane reserves for encoded payloads"
        )
    if value is None or isinstance(value, bool | float):
        return value
    try:
        text = dumps(value)
    except ValueError as exc:  # an int too long to convert to text
        raise SerializationError(f"{what} cannot be written as JSON: {exc}") from None
    _check_size(text, what)
    if isinstance(value, str | int):
        return value
    return json.loads(text)


def _check_size(text: str, what: str) -> None:
    if len(text) * 4 <= MAX_PAYLOAD_BYTES and text.isascii():
        return  # the common case: no need to encode it to know
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise SerializationError(
            f"{what} holds a lone surrogate ({exc.object[exc.start : exc.end]!r}), which UTF-8"
            " cannot encode"
        ) from None
    if size > MAX_PAYLOAD_BYTES:
        raise SerializationError(
            f"{what} is {size:,} bytes of JSON, over the {MAX_PAYLOAD_BYTES:,}-byte limit"
        )
