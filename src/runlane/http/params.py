"""Reading requests: JSON bodies, the runs query, cursors; anything invalid is a typed 422."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from starlette.requests import Request

from ..attributes import AttributeValue, check_attributes, parse_filters
from ..definitions import check_timeout
from ..errors import SerializationError
from ..models import RunCursor, RunQuery, RunStatus
from .errors import HTTPError, invalid

N = TypeVar("N", int, float)

DEFAULT_PAGE = 50
MAX_PAGE = 500
UPDATE_TIMEOUT = 30.0  # seconds an update waits for its reply, unless ?timeout= says
MAX_UPDATE_TIMEOUT = 600.0


async def read_json(request: Request) -> Any:
    """The request body as JSON; an empty body is ``None``."""
    raw = await request.body()
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HTTPError(400, "invalid_json", f"request body is not valid JSON: {exc}") from None


def query_int(request: Request, name: str, default: int, low: int, high: int) -> int:
    number = _query_number(request, name, int, "an integer")
    if number is None:
        return default
    if not low <= number <= high:
        raise invalid(f"{name} must be between {low} and {high}, got {number}", field=name)
    return number


def query_seconds(request: Request, name: str, default: float, high: float) -> float:
    """A duration in seconds from the query: more than 0, at most ``high``."""
    number = _query_number(request, name, float, "a number of seconds")
    if number is None:
        return default
    if not 0 < number <= high:
        raise invalid(
            f"{name} must be more than 0 and at most {high:g}, got {number:g}", field=name
        )
    return number


def _query_number(request: Request, name: str, kind: Callable[[str], N], what: str) -> N | None:
    value = request.query_params.get(name)
    if value is None:
        return None
    try:
        return kind(value)
    except ValueError:
        raise invalid(f"{name} must be {what}, got {value!r}", field=name) from None


async def read_payload(request: Request) -> Any:
    """The ``payload`` of a body ``{"payload": ...}`` (None for an empty body)."""
    body = await read_json(request)
    if body is None:
        return None
    if not isinstance(body, dict) or set(body) - {"payload"}:
        raise invalid('the body must be {"payload": <JSON>} or empty')
    return body.get("payload")


def run_status(value: str | None, field: str = "status") -> RunStatus | None:
    if not value:
        return None
    try:
        return RunStatus(value)
    except ValueError:
        allowed = ", ".join(s.value for s in RunStatus)
        raise invalid(f"{field} must be one of {allowed}; got {value!r}", field=field) from None


def _time(request: Request, name: str) -> datetime | None:
    value = request.query_params.get(name)
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise invalid(f"{name} must be an ISO-8601 time, got {value!r}", field=name) from None
    # A time without a zone is UTC, as every time runlane shows.
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def run_query(request: Request, *, cursor: bool = True) -> RunQuery:
    """The runs a request asks for: ``workflow``, ``status``, ``tag``, ``created_from``,
    ``created_until``, ``namespace``, attributes (``attr.<name>=<value>``, any number of them)
    and, with ``cursor``, where the page starts (``cursor``)."""
    params = request.query_params
    return RunQuery(
        workflow=params.get("workflow") or None,
        status=run_status(params.get("status")),
        tag=params.get("tag") or None,
        created_from=_time(request, "created_from"),
        created_until=_time(request, "created_until"),
        after=decode_cursor(params.get("cursor")) if cursor else None,
        namespace=params.get("namespace") or None,
        attributes=attribute_filter(request) or None,
    )


ATTRIBUTE_PREFIX = "attr."


def attribute_filter(request: Request) -> dict[str, AttributeValue]:
    """The ``attr.<name>=<value>`` parameters as an attributes filter: a value that reads as a
    JSON number, ``true`` or ``false`` is that value, a JSON string its text, anything else
    the text as it is (``attributes.parse_value``). A bad one is a 422 naming its parameter."""
    wanted: dict[str, AttributeValue] = {}
    for name, text in request.query_params.multi_items():
        if not name.startswith(ATTRIBUTE_PREFIX):
            continue
        try:
            [(key, value)] = parse_filters([(name.removeprefix(ATTRIBUTE_PREFIX), text)]).items()
        except SerializationError as exc:
            raise invalid(str(exc), field=name) from None
        wanted[key] = value
    return wanted


def encode_cursor(cursor: RunCursor) -> str:
    """An opaque cursor: the page's last run, ``(created_at, id)``."""
    text = json.dumps([cursor.created_at.isoformat(), cursor.id])
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def audit_cursor(value: str | None) -> int | None:
    """Where a page of the audit log starts: the id of the previous page's last entry (the
    ``next_cursor`` that page gave), or None for the newest entries."""
    if value is None or value == "":
        return None
    if not value.isdigit() or len(value) > 18:
        raise invalid("cursor is not one this API gave out", field="cursor")
    return int(value)


def decode_cursor(value: str | None) -> RunCursor | None:
    if not value:
        return None
    try:
        padded = value + "=" * (-len(value) % 4)
        created_at, run_id = json.loads(base64.urlsafe_b64decode(padded.encode()))
        moment = datetime.fromisoformat(created_at)
        if moment.tzinfo is None or not isinstance(run_id, str):
            raise ValueError(value)
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise invalid("cursor is not one this API gave out", field="cursor") from None
    return RunCursor(moment, run_id)


@dataclass(frozen=True)
class StartRequest:
    """The body of ``POST /runs``."""

    workflow: str
    input: Any = None
    run_id: str | None = None
    tags: tuple[str, ...] = ()
    priority: int = 0
    if_exists: Literal["return", "fail"] = "return"
    version: str | None = None
    execution_timeout: float | None = None
    attributes: dict[str, AttributeValue] = field(default_factory=dict)

    @classmethod
    def parse(cls, body: Any) -> StartRequest:
        if not isinstance(body, dict):
            raise invalid('the body must be a JSON object with a "workflow" name')
        unknown = sorted(set(body) - set(cls.__dataclass_fields__))
        if unknown:
            raise invalid(f"unknown field(s): {', '.join(unknown)}", field=unknown[0])
        workflow = body.get("workflow")
        if not isinstance(workflow, str) or not workflow:
            raise invalid('"workflow" must be the name of a workflow', field="workflow")
        return cls(
            workflow=workflow,
            input=body.get("input"),
            run_id=_run_id(body.get("run_id")),
            tags=_tags(body.get("tags")),
            priority=_priority(body.get("priority", 0)),
            if_exists=_if_exists(body.get("if_exists", "return")),
            version=_version(body.get("version")),
            execution_timeout=_timeout(body.get("execution_timeout")),
            attributes=_attributes(body.get("attributes")),
        )


MAX_BATCH = 1000  # starts in one POST /runs:batch


def parse_batch(body: Any) -> list[StartRequest]:
    """The body of ``POST /runs:batch``: ``{"runs": [<a POST /runs body>, ...]}``, 1 to
    ``MAX_BATCH`` of them; a bad one is a 422 naming its place (``runs[3].priority``)."""
    if not isinstance(body, dict) or set(body) != {"runs"} or not isinstance(body["runs"], list):
        raise invalid('the body must be {"runs": [<start>, ...]}', field="runs")
    runs = body["runs"]
    if not 1 <= len(runs) <= MAX_BATCH:
        raise invalid(f'"runs" must hold 1 to {MAX_BATCH} starts, got {len(runs)}', field="runs")
    parsed = []
    for n, item in enumerate(runs):
        try:
            parsed.append(StartRequest.parse(item))
        except HTTPError as exc:
            place = f"runs[{n}]"
            field = exc.body.get("field")
            exc.body["field"] = f"{place}.{field}" if field else place
            exc.body["message"] = f"{place}: {exc.body['message']}"
            raise
    return parsed


def _timeout(value: Any) -> float | None:
    try:
        return check_timeout(value)
    except ValueError:
        message = '"execution_timeout" must be a positive number of seconds'
        raise invalid(message, field="execution_timeout") from None


@dataclass(frozen=True)
class ForkRequest:
    """The body of ``POST /runs/{id}/fork`` (every field optional; no body: the defaults)."""

    from_seq: int | None = None
    run_id: str | None = None
    input: Any = None
    version: str | None = None

    @classmethod
    def parse(cls, body: Any) -> ForkRequest:
        if body is None:
            return cls()
        if not isinstance(body, dict):
            raise invalid("the body must be a JSON object")
        unknown = sorted(set(body) - set(cls.__dataclass_fields__))
        if unknown:
            raise invalid(f"unknown field(s): {', '.join(unknown)}", field=unknown[0])
        from_seq = body.get("from_seq")
        if from_seq is not None and (
            isinstance(from_seq, bool) or not isinstance(from_seq, int) or from_seq < 1
        ):
            raise invalid('"from_seq" must be a positive integer', field="from_seq")
        return cls(
            from_seq=from_seq,
            run_id=_run_id(body.get("run_id")),
            input=body.get("input"),
            version=_version(body.get("version")),
        )


def _attributes(value: Any) -> dict[str, AttributeValue]:
    if value is None:
        return {}
    try:
        return check_attributes(value, '"attributes"')
    except SerializationError as exc:
        raise invalid(str(exc), field="attributes") from None


def _version(value: Any) -> str | None:
    if value is None or (isinstance(value, str) and value):
        return value
    raise invalid('"version" must be a non-empty string', field="version")


def _run_id(value: Any) -> str | None:
    if value is None or (isinstance(value, str) and value):
        return value
    raise invalid('"run_id" must be a non-empty string', field="run_id")


def _tags(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise invalid('"tags" must be a list of strings', field="tags")
    return tuple(value)


def _priority(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(f'"priority" must be an integer, got {value!r}', field="priority")
    return value


def _if_exists(value: Any) -> Literal["return", "fail"]:
    if value == "return":
        return "return"
    if value == "fail":
        return "fail"
    raise invalid('"if_exists" must be "return" or "fail"', field="if_exists")


__all__ = [
    "DEFAULT_PAGE",
    "MAX_BATCH",
    "MAX_PAGE",
    "StartRequest",
    "attribute_filter",
    "audit_cursor",
    "decode_cursor",
    "encode_cursor",
    "parse_batch",
    "query_int",
    "read_json",
    "run_query",
    "run_status",
]
