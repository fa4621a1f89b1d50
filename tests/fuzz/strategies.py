"""Hypothesis strategies for values that cross runlane's boundaries: JSON, and everything else."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from hypothesis import strategies as st

from runlane.serialization import MAX_DEPTH, MAX_PAYLOAD_BYTES

json_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_leaves,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5)
    ),
    max_leaves=25,
)


def _huge_int() -> int:
    return 10**5000  # too long to write as text (Python refuses beyond 4,300 digits)


def _nested(depth: int) -> Any:
    value: Any = "bottom"
    for n in range(depth):
        value = [value] if n % 2 else {"k": value}
    return value


def _cycle() -> Any:
    looped: list[Any] = [1]
    looped.append(looped)
    return {"a": looped}


def _huge() -> str:
    return "x" * (MAX_PAYLOAD_BYTES + 1)


bad_leaves = (
    st.sampled_from(
        [
            math.nan,
            math.inf,
            -math.inf,
            b"bytes",
            {1, 2},
            frozenset({"a"}),
            object(),
            datetime(2026, 1, 1, tzinfo=UTC),
            "lone \ud800 surrogate",
        ]
    )
    | st.builds(lambda: _nested(MAX_DEPTH + 5))
    | st.builds(_cycle)
    | st.builds(_huge)
    | st.builds(_huge_int)
)

non_json_values = st.recursive(
    bad_leaves | st.dictionaries(st.integers(), json_leaves, min_size=1, max_size=2),
    lambda children: (
        st.lists(children, min_size=1, max_size=3)
        | st.dictionaries(st.text(max_size=5), children, min_size=1, max_size=3)
    ),
    max_leaves=4,
)

any_values = json_values | non_json_values
