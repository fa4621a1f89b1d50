"""Run attributes: the values that index a run, what they may be, and how a filter matches them.

A run's attributes are a flat mapping of names to scalars (``str``, ``int``, ``float``,
``bool``), given at its start and set by its body (``ctx.set_attributes``). Every store indexes
them, and a listing filters on any number of them at once, by equality of value and type: a
number matches an equal number (``2`` matches ``2.0``, as JSON numbers compare), a string only
an equal string, a boolean only the same boolean (``1`` is not ``"1"``, ``True`` is not ``1``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import SerializationError

AttributeValue = str | int | float | bool
"""What an attribute may hold."""

INT_RANGE = range(-(2**63), 2**63)
"""An integer attribute is a signed 64-bit integer (what every store indexes exactly)."""


def check_attributes(attributes: object, what: str = "attributes") -> dict[str, AttributeValue]:
    """``attributes`` as a run keeps them (a new dict), or ``SerializationError`` naming the
    offending entry: a mapping whose keys are non-empty strings and whose values are ``str``,
    ``int`` (64-bit), finite ``float`` or ``bool``; no NUL character and no lone surrogate in a
    key or a string (PostgreSQL's ``jsonb`` refuses them)."""
    if not isinstance(attributes, Mapping):
        raise SerializationError(
            f"{what} must be a mapping of names to values, not {type(attributes).__name__}"
        )
    return {
        _checked_key(key, what): _checked_value(value, f"{what}[{key!r}]")
        for key, value in attributes.items()
    }


def _checked_key(key: object, what: str) -> str:
    if not isinstance(key, str) or not key:
        raise SerializationError(f"{what} has a key {key!r}: a name must be a non-empty string")
    return _checked_text(key, f"{what} key {key!r}")


def _checked_value(value: object, what: str) -> AttributeValue:
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return _checked_text(str.__str__(value), what)
    if isinstance(value, int):
        if int(value) not in INT_RANGE:
            raise SerializationError(f"{what} is {value!r}, beyond a signed 64-bit integer")
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SerializationError(f"{what} is {value!r}, which JSON cannot represent")
        return float(value)
    raise SerializationError(
        f"{what} is a {type(value).__name__}: an attribute is a str, int, float or bool"
    )


def _checked_text(text: str, what: str) -> str:
    if "\x00" in text:
        raise SerializationError(f"{what} holds a NUL character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise SerializationError(f"{what} holds a lone surrogate") from None
    return text


def same_value(stored: AttributeValue, wanted: AttributeValue) -> bool:
    """Whether a stored attribute equals a filter's value, type included: booleans match only
    booleans, strings only strings, numbers (int or float) an equal number."""
    if isinstance(stored, bool) or isinstance(wanted, bool):
        return type(stored) is type(wanted) and stored == wanted
    if isinstance(stored, str) or isinstance(wanted, str):
        return isinstance(stored, str) and isinstance(wanted, str) and stored == wanted
    return stored == wanted


def matches(attributes: Mapping[str, AttributeValue], wanted: Mapping[str, AttributeValue]) -> bool:
    """Whether a run with ``attributes`` passes the filter ``wanted`` (every entry equal)."""
    return all(
        key in attributes and same_value(attributes[key], value) for key, value in wanted.items()
    )


def parse_value(text: str) -> AttributeValue:
    """A filter's value as typed on a command line or in a URL: a JSON number, ``true`` or
    ``false`` is that value, a JSON string (``"42"``, quotes included) is its text, anything
    else is taken as the string it is. A number beyond what an attribute holds raises
    ``SerializationError``."""
    try:
        value: Any = json.loads(text, parse_constant=_not_a_number)
    except ValueError:
        return text
    if isinstance(value, str | bool | int | float):
        return _checked_value(value, f"attribute value {text!r}")
    return text


def filter_text(value: AttributeValue) -> str:
    """How a filter writes ``value`` (the inverse of :func:`parse_value`): a string that would
    read as a number or a boolean, or as a JSON string, in JSON quotes; the rest as it is."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if not isinstance(value, str):
        return json.dumps(value)
    try:
        plain = parse_value(value) == value
    except SerializationError:  # a number too big: the string it is, quoted
        plain = False
    return value if plain else json.dumps(value, ensure_ascii=False)


def _not_a_number(name: str) -> Any:
    raise ValueError(name)  # NaN and Infinity are strings here, as JSON has no such numbers


def parse_filters(pairs: Iterable[tuple[str, str]]) -> dict[str, AttributeValue]:
    """``(name, text)`` pairs as an attributes filter, each text read by :func:`parse_value`;
    an empty or bad name raises ``SerializationError``."""
    return check_attributes({name: parse_value(text) for name, text in pairs}, "attribute filter")


__all__ = [
    "INT_RANGE",
    "AttributeValue",
    "check_attributes",
    "filter_text",
    "matches",
    "parse_filters",
    "parse_value",
    "same_value",
]
