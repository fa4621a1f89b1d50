"""JSON values are checked at the boundary, with a path to the offending value."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runlane import SerializationError
from runlane.errors import ChildFailedError, ConcurrencyLimitError, error_dict, raise_stored
from runlane.serialization import check_json, dumps, normalise
from runlane.testing import ManualClock


@pytest.mark.parametrize("value", [None, 1, 1.5, "s", True, [1, "a"], {"a": {"b": [None]}}])
def test_json_values_pass(value: object) -> None:
    assert check_json(value) == value


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ({"when": datetime.now(UTC)}, "['when']"),
        ([1, {2}], "[1]"),
        ({1: "a"}, "non-string key"),
        (math.nan, "nan"),
        (b"bytes", "bytes"),
    ],
)
def test_non_json_values_raise_with_the_path(value: object, where: str) -> None:
    with pytest.raises(SerializationError, match=None) as info:
        check_json(value, "input")
    assert where in str(info.value)


def test_tuples_normalise_to_lists_like_after_a_replay() -> None:
    assert normalise({"a": (1, 2)}) == {"a": [1, 2]}


def test_errors_round_trip_through_their_stored_form_with_attributes_and_cause() -> None:
    quota = ConcurrencyLimitError("wf", "tenant:a", 3, 3)
    failure = ChildFailedError("child-1", error_dict(quota, with_traceback=False))
    failure.__cause__ = quota
    rebuilt = raise_stored(error_dict(failure))
    assert isinstance(rebuilt, ChildFailedError) and rebuilt.child_id == "child-1"
    assert isinstance(rebuilt.__cause__, ConcurrencyLimitError)
    assert rebuilt.__cause__.limit == 3
    assert isinstance(raise_stored({"type": "KeyError", "message": "x"}), KeyError)
    unknown = raise_stored({"type": "CustomError", "message": "boom"})
    assert getattr(unknown, "type", None) == "CustomError" and "boom" in str(unknown)


def test_the_manual_clock_moves_only_forward_and_only_when_told() -> None:
    clock = ManualClock()
    start = clock.now()
    assert clock.advance(5) == clock.now()
    assert (clock.now() - start).total_seconds() == 5
    with pytest.raises(ValueError):
        clock.advance(-1)
    with pytest.raises(ValueError):
        clock.set(datetime(2026, 1, 1))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)  # fmt: skip


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_values)
def test_dumps_writes_what_the_standard_encoder_writes(value: object) -> None:
    expected = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    assert dumps(value) == expected
    assert json.loads(dumps(value)) == value


def test_dumps_refuses_what_json_cannot_hold() -> None:
    looped: list[object] = []
    looped.append(looped)
    with pytest.raises(ValueError, match="Circular reference"):
        dumps(looped)
    with pytest.raises(ValueError, match="not JSON compliant"):
        dumps([math.nan])
    with pytest.raises(TypeError, match="not JSON serializable"):
        dumps({"a": object()})
