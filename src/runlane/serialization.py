"""JSON values in and out of the store, checked at the boundary."""

from __future__ import annotations

import json
import math
from typing import Any

from .errors import SerializationError


def check_json(value: Any, what: str = "value") -> Any:
    """Return ``value`` unchanged if it is a JSON value, else raise SerializationError."""
    _check(value, what)
    return value


def _check(value: Any, path: str) -> None:
    if value is None or isinstance(value, bool | int | str):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SerializationError(f"{path} is {value!r}, which JSON cannot represent")
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check(item, f"{path}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise SerializationError(f"{path} has a non-string key {key!r}")
            _check(item, f"{path}[{key!r}]")
        return
    raise SerializationError(
        f"{path} is a {type(value).__name__}, which is not JSON-serialisable"
        " (use dict, list, str, int, float, bool or None)"
    )


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def loads(text: str | bytes | None) -> Any:
    return None if text is None else json.loads(text)


def normalise(value: Any, what: str = "value") -> Any:
    """Check and round-trip through JSON, so tuples come back as lists like after a replay."""
    check_json(value, what)
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return json.loads(dumps(value))
