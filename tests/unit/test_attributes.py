"""Run attributes: what they may be, how a filter's text reads, how values match, and the
attributes records a decision may carry."""

from __future__ import annotations

from typing import Any

import pytest

from runlane import SerializationError
from runlane.attributes import (
    AttributeValue,
    check_attributes,
    filter_text,
    matches,
    parse_filters,
    parse_value,
    same_value,
)
from runlane.remote.tasks import parse_decision
from runlane.transports.messages import Malformed


def test_valid_attributes_come_back_as_a_new_plain_dict() -> None:
    given = {"customer": "acme", "tier": 2, "ratio": 0.5, "vip": False, "big": -(2**63)}
    checked = check_attributes(given)
    assert checked == given and checked is not given


@pytest.mark.parametrize(
    ("stored", "wanted", "same"),
    [
        ("acme", "acme", True),
        (2, 2.0, True),
        (2.5, 2.5, True),
        (1, "1", False),
        ("1", 1, False),
        (True, 1, False),
        (1, True, False),
        (False, 0, False),
        (True, True, True),
        (False, False, True),
        ("true", True, False),
    ],
)
def test_values_match_by_value_and_type(stored: Any, wanted: Any, same: bool) -> None:
    assert same_value(stored, wanted) is same


def test_a_filter_matches_when_every_entry_is_there_and_equal() -> None:
    run: dict[str, AttributeValue] = {"customer": "acme", "tier": 2}
    assert matches(run, {}) and matches(run, {"tier": 2.0})
    assert matches(run, {"customer": "acme", "tier": 2})
    assert not matches(run, {"customer": "acme", "tier": 3})
    assert not matches(run, {"region": "eu"})


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("acme", "acme"),
        ("42", 42),
        ("-1.5", -1.5),
        ("1e3", 1000.0),
        ("true", True),
        ("false", False),
        ('"42"', "42"),
        ('"true"', "true"),
        ("null", "null"),
        ("[1, 2]", "[1, 2]"),
        ('{"a": 1}', '{"a": 1}'),
        ("NaN", "NaN"),
        ("Infinity", "Infinity"),
        ("", ""),
        ("acme corp", "acme corp"),
    ],
)
def test_a_filters_text_is_a_json_scalar_when_it_reads_as_one_else_a_string(
    text: str, value: Any
) -> None:
    parsed = parse_value(text)
    assert parsed == value and type(parsed) is type(value)


@pytest.mark.parametrize("text", ["1e400", "99999999999999999999", '"a\\u0000b"'])
def test_a_filters_text_beyond_what_an_attribute_holds_is_refused(text: str) -> None:
    with pytest.raises(SerializationError):
        parse_value(text)


def test_filters_are_read_from_name_and_text_pairs() -> None:
    assert parse_filters([("customer", "acme"), ("tier", "2")]) == {"customer": "acme", "tier": 2}
    with pytest.raises(SerializationError, match="non-empty"):
        parse_filters([("", "acme")])


@pytest.mark.parametrize(
    "value",
    ["acme", "Acme Corp", "2", "true", "null", '"quoted"', "[1]", "1e400", "", "é", 2, -1.5, True],
)
def test_a_value_written_as_a_filter_reads_back_as_itself(value: AttributeValue) -> None:
    read = parse_value(filter_text(value))
    assert read == value and type(read) is type(value)


def _decision(record: dict[str, Any]) -> dict[str, Any]:
    base = {"seq": 1, "kind": "attributes", "name": "attributes", "status": "completed"}
    return {
        "kind": "decision",
        "task_id": "t",
        "run_id": "r",
        "checkpoints": [{**base, **record}],
        "outcome": {"type": "suspend"},
    }


def test_a_decision_carries_the_attributes_its_turn_set() -> None:
    decision = parse_decision(_decision({"output": {"stage": "paid", "n": 2}}))
    [record] = decision.records
    assert record.kind == "attributes" and record.output == {"stage": "paid", "n": 2}


@pytest.mark.parametrize(
    "record",
    [
        {"output": ["stage", "paid"]},
        {"output": {"stage": None}},
        {"output": {"": "x"}},
        {"output": {"k": "nul\x00"}},
        {"output": {"stage": "paid"}, "status": "pending"},
    ],
)
def test_a_decision_with_a_bad_attributes_record_is_malformed(record: dict[str, Any]) -> None:
    with pytest.raises(Malformed):
        parse_decision(_decision(record))
