"""The OpenAPI 3.1 document of the HTTP API, served at ``/openapi.json``.

Written by hand next to the handlers it describes; the test suite fuzzes the API against it
(schemathesis), so a handler and its description cannot drift apart unnoticed.
"""

from __future__ import annotations

from typing import Any

from .._version import __version__
from ..models import RunStatus
from .params import MAX_BATCH, MAX_PAGE, MAX_UPDATE_TIMEOUT, UPDATE_TIMEOUT

JSONObject = dict[str, Any]

_STATUSES = [s.value for s in RunStatus]
_TIME = {"type": "string", "format": "date-time"}
_MAYBE_TIME = {"type": ["string", "null"], "format": "date-time"}
_ANY: JSONObject = {}


def _ref(name: str) -> JSONObject:
    return {"$ref": f"#/components/schemas/{name}"}


def _object(required: list[str], **properties: Any) -> JSONObject:
    return {"type": "object", "required": required, "properties": properties}


def _json(schema: JSONObject, description: str, **extra: Any) -> JSONObject:
    return {
        "description": description,
        "content": {"application/json": {"schema": schema}},
        **extra,
    }


_ERROR = _json(_ref("Error"), "an error")
_RETRY_AFTER = {"Retry-After": {"schema": {"type": "string"}, "description": "seconds"}}
_UNAVAILABLE = _json(_ref("Error"), "the store is unreachable; try again", headers=_RETRY_AFTER)
_REFUSED = _json(
    _ref("Error"),
    "refused by a quota (concurrency_limit), a full singleton backlog (singleton_queue_full) or"
    " a rate limit (rate_limit: Retry-After is when its window has room)",
    headers=_RETRY_AFTER,
)


def _responses(ok: dict[str, JSONObject], *errors: str) -> JSONObject:
    found = {**ok, "401": _ERROR, "503": _UNAVAILABLE}
    for status in errors:
        found[status] = _REFUSED if status == "429" else _ERROR
    return found


def _read(summary: str, schema: JSONObject, description: str) -> JSONObject:
    """A GET without parameters that answers ``schema``."""
    return {
        "get": {"summary": summary, "responses": _responses({"200": _json(schema, description)})}
    }


def _path_param(name: str, description: str) -> JSONObject:
    schema = {"type": "string", "minLength": 1}
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": schema,
        "description": description,
    }


def _query(name: str, schema: JSONObject, description: str) -> JSONObject:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


_RUN_ID = _path_param("run_id", "the run's id")


def _control(summary: str, flag: str, description: str) -> JSONObject:
    """A POST on a run (no body) that answers its id and whether the control applied."""
    answer = _object(["run_id", flag], run_id={"type": "string"}, **{flag: {"type": "boolean"}})
    return {
        "post": {
            "summary": summary,
            "parameters": [_RUN_ID],
            "responses": _responses({"200": _json(answer, description)}, "404"),
        }
    }


_FILTERS = [
    _query("workflow", {"type": "string"}, "only runs of this workflow"),
    _query("status", {"type": "string", "enum": _STATUSES}, "only runs in this status"),
    _query("tag", {"type": "string"}, "only runs carrying this tag (e.g. singleton:store:A)"),
    _query("created_from", _TIME, "only runs created at or after this time"),
    _query("created_until", _TIME, "only runs created before this time"),
    _query(
        "namespace",
        {"type": "string"},
        "only runs of this namespace (a server whose engine is fenced to its namespace shows"
        " only that one's runs, and none for another)",
    ),
]

# Parameters named ``attr.<name>``: OpenAPI names each parameter, so the operations say it.
_ATTRIBUTE_FILTERS = (
    "Filter by run attributes with one `attr.<name>=<value>` parameter per attribute"
    " (`?attr.customer=acme&attr.tier=2`): the runs whose attributes hold every one, equal in"
    " value and type. A value that reads as a JSON number, `true` or `false` is that value; a"
    ' JSON string (`"42"`, quotes included) is its text; anything else is the text as it is.'
    " A value no attribute can hold (a number beyond a 64-bit integer, a NUL) is a 422."
)
_ATTRIBUTES = {
    "type": "object",
    "description": "names to strings, numbers or booleans: what attr.<name> filters match",
    "additionalProperties": {"type": ["string", "number", "boolean"]},
}

_SCHEMAS: JSONObject = {
    "AuditEntry": _object(
        ["id", "at", "actor", "source", "action", "run_id", "detail", "outcome", "namespace"],
        id={"type": "integer"},
        at=_TIME,
        actor={"type": "string", "description": "the token's name, or the OS user (cli)"},
        source={"type": "string", "enum": ["http", "cli"]},
        action={"type": "string", "description": "start, cancel, retry, signal, ..."},
        run_id={"type": ["string", "null"]},
        detail={
            "type": ["string", "null"],
            "description": "a signal's, update's or event's name, a schedule's id, a fork's id",
        },
        outcome={"type": "string", "description": "ok, or what refused it (403 forbidden, ...)"},
        namespace={"type": ["string", "null"]},
    ),
    "LaneSeries": _object(
        ["name", "kind", "key", "limit", "points"],
        name={"type": "string"},
        kind={"type": "string"},
        key={"type": "string"},
        limit={"type": ["integer", "null"]},
        points={"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
    ),
    "Error": _object(
        ["type", "error", "message"],
        type={"type": "string", "description": "what went wrong, for programs: run_not_found, ..."},
        error={"type": "string", "description": "the error's class name"},
        message={"type": "string"},
    ),
    "RunSummary": _object(
        ["id", "workflow", "version", "status", "created_at", "updated_at", "tags"],
        id={"type": "string"},
        workflow={"type": "string"},
        version={"type": "string"},
        status={"type": "string", "enum": _STATUSES},
        created_at=_TIME,
        updated_at=_TIME,
        tags={"type": "array", "items": {"type": "string"}},
    ),
    "Run": {
        "allOf": [
            _ref("RunSummary"),
            _object(
                [
                    "input",
                    "output",
                    "error",
                    "wake_at",
                    "parent_id",
                    "namespace",
                    "priority",
                    "forked_from",
                    "deadline_at",
                    "pause_requested_at",
                    "attributes",
                ],
                input=_ANY,
                output=_ANY,
                error={"type": ["object", "null"]},
                wake_at=_MAYBE_TIME,
                parent_id={"type": ["string", "null"]},
                namespace={"type": ["string", "null"]},
                priority={"type": "integer"},
                forked_from={
                    "type": ["array", "null"],
                    "prefixItems": [{"type": "string"}, {"type": "integer"}],
                    "description": "a fork: the run it was forked from and the sequence number",
                },
                deadline_at={**_MAYBE_TIME, "description": "cancelled if not finished by then"},
                pause_requested_at={
                    **_MAYBE_TIME,
                    "description": "a pause asked while a turn runs: it pauses after that turn",
                },
                attributes=_ATTRIBUTES,
            ),
        ]
    },
    "Step": _object(
        ["run_id", "seq", "name", "kind", "status", "attempts"],
        run_id={"type": "string"},
        seq={"type": "integer"},
        name={"type": "string"},
        kind={"type": "string"},
        status={"type": "string"},
        input=_ANY,
        output=_ANY,
        error={"type": ["object", "null"]},
        attempts={"type": "integer"},
        started_at=_MAYBE_TIME,
        finished_at=_MAYBE_TIME,
        last_heartbeat_at=_MAYBE_TIME,
        dispatches={"type": "integer"},
    ),
    "StartRequest": {
        **_object(
            ["workflow"],
            workflow={"type": "string", "minLength": 1, "description": "a registered workflow"},
            input={"description": "the run's input: any JSON value"},
            run_id={"type": "string", "minLength": 1, "description": "idempotency key"},
            tags={"type": "array", "items": {"type": "string"}},
            priority={"type": "integer", "description": "higher runs first; default 0"},
            if_exists={
                "type": "string",
                "enum": ["return", "fail"],
                "description": "an existing run_id: answer it (200) or refuse (409)",
            },
            version={
                "type": "string",
                "minLength": 1,
                "description": "the workflow's version (default: the latest registered)",
            },
            execution_timeout={
                "type": "number",
                "exclusiveMinimum": 0,
                "description": "seconds the run may take (default: the workflow's); then it is"
                " cancelled with its children",
            },
            attributes={
                **_ATTRIBUTES,
                "description": "what indexes the run: names (non-empty) to strings, integers"
                " (64-bit), numbers or booleans",
            },
        ),
        "additionalProperties": False,
    },
    "ForkRequest": {
        **_object(
            [],
            from_seq={
                "type": "integer",
                "minimum": 1,
                "description": "where the fork goes on (default: the first failed or unfinished"
                " operation); the settled operations before it are reused",
            },
            run_id={"type": "string", "minLength": 1, "description": "default <id>.fork.<n>"},
            input={"description": "the fork's input (default: the original's)"},
            version={
                "type": "string",
                "minLength": 1,
                "description": "the workflow's version (default: the latest registered)",
            },
        ),
        "additionalProperties": False,
    },
    "BatchRequest": _object(
        ["runs"],
        runs={
            "type": "array",
            "items": _ref("StartRequest"),
            "minItems": 1,
            "maxItems": MAX_BATCH,
        },
    ),
    "BatchAnswer": _object(
        ["runs"],
        runs={
            "type": "array",
            "items": _object(
                ["status"],
                status={
                    "type": "integer",
                    "description": "what POST /runs would have answered: 201, 200, 404, 409,"
                    " 422, 429",
                },
                run=_ref("Started"),
                error=_ref("Error"),
                retry_after={
                    "type": "integer",
                    "description": "a 429's seconds until a retry may succeed",
                },
            ),
        },
    ),
    "Started": {
        "allOf": [
            _ref("Run"),
            _object(
                ["created", "input_differs", "debounced"],
                created={"type": "boolean"},
                input_differs={
                    "type": "boolean",
                    "description": "an existing run whose input is not the one posted",
                },
                debounced={
                    "type": "boolean",
                    "description": "the start folded into its debounce key's run that had not"
                    " begun: that run, with the input posted and its beginning moved",
                },
            ),
        ]
    },
    "Engine": _object(
        ["id", "host", "pid", "started_at", "last_beat_at", "alive", "serves", "groups"],
        id={"type": "string"},
        host={"type": "string"},
        pid={"type": "integer"},
        namespace={"type": ["string", "null"]},
        started_at=_TIME,
        last_beat_at=_TIME,
        alive={"type": "boolean", "description": "it beat within three of its leases"},
        serves={
            "type": "array",
            "items": _object(
                ["workflow", "version"], workflow={"type": "string"}, version={"type": "string"}
            ),
            "description": "the (workflow, version) pairs whose runs it claims",
        },
        groups={"type": "array", "items": {"type": "string"}},
    ),
    "Schedule": _object(
        ["id", "workflow", "paused", "next_fire_at", "last_fire_at", "last_run_id", "last_error"],
        id={"type": "string"},
        workflow={"type": "string"},
        cron={"type": ["string", "null"]},
        every={"type": ["number", "null"]},
        timezone={"type": "string"},
        input=_ANY,
        overlap={"type": "string", "enum": ["allow", "skip", "buffer_one", "cancel_other"]},
        catchup={"type": "string", "enum": ["latest", "skip", "all"]},
        max_catchup={"type": "integer"},
        jitter={"type": "number"},
        concurrency={"type": ["object", "null"]},
        priority={"type": "integer"},
        tags={"type": "array", "items": {"type": "string"}},
        paused={"type": "boolean"},
        next_fire_at=_MAYBE_TIME,
        last_fire_at=_MAYBE_TIME,
        last_run_id={"type": ["string", "null"]},
        last_error={"type": ["object", "null"]},
        created_at=_TIME,
        updated_at=_TIME,
    ),
    "Lane": _object(
        [
            "kind",
            "key",
            "name",
            "workflow",
            "namespace",
            "tag",
            "limit",
            "usage",
            "waiting",
            "holders",
            "waiters",
        ],
        kind={"type": "string", "enum": ["singleton", "concurrency"]},
        key={"type": "string", "description": "the key as the rule gave it"},
        name={"type": "string", "description": "the lane as stored"},
        workflow={"type": ["string", "null"]},
        namespace={
            "type": ["string", "null"],
            "description": "the namespace whose own lane it is (null: shared by every namespace)",
        },
        tag={"type": "string"},
        limit={"type": ["integer", "null"]},
        usage={"type": "integer", "description": "slots held / runs counted"},
        waiting={"type": "integer", "description": "runs waiting for a slot"},
        holders={
            "type": "array",
            "items": _ref("LaneRun"),
            "description": "oldest first; without ?key=, the first 3 of usage",
        },
        waiters={
            "type": "array",
            "items": _ref("LaneRun"),
            "description": "FIFO order; without ?key=, the first 3 of waiting",
        },
    ),
    "LaneRun": _object(
        ["id", "workflow", "status", "created_at"],
        id={"type": "string"},
        workflow={"type": "string"},
        status={"type": "string", "enum": _STATUSES},
        created_at=_TIME,
    ),
    "CountedStart": {
        "allOf": [
            _ref("RunSummary"),
            _object(["counted_at"], counted_at=_TIME),
        ],
        "description": "a run and the instant its start counts in its rate window",
    },
    "RateLane": _object(
        [
            "kind",
            "name",
            "key",
            "workflow",
            "namespace",
            "limit",
            "period",
            "used",
            "window_start",
            "resets_at",
            "clears_at",
            "counted",
            "held",
        ],
        kind={"type": "string", "enum": ["rate_limit"]},
        name={"type": "string", "description": "the lane as stored"},
        key={"type": ["string", "null"], "description": "null: one limit for the workflow"},
        workflow={"type": ["string", "null"]},
        namespace={
            "type": ["string", "null"],
            "description": "the namespace whose own lane it is (null: shared by every namespace)",
        },
        limit={"type": "integer"},
        period={"type": "number", "description": "the sliding window, in seconds"},
        used={"type": "integer", "description": "starts counted in the window ending now"},
        window_start=_TIME,
        resets_at={
            **_MAYBE_TIME,
            "description": "first instant a new start fits the window (null: it fits now)",
        },
        clears_at={**_MAYBE_TIME, "description": "when the last start counted leaves it"},
        counted={"type": "array", "items": _ref("CountedStart")},
        held={
            "type": "array",
            "items": _ref("CountedStart"),
            "description": "throttled starts counted ahead, in the order they begin",
        },
    ),
    "DebounceLane": _object(
        ["kind", "name", "key", "workflow", "namespace", "run", "first_at", "fires_at"],
        kind={"type": "string", "enum": ["debounce"]},
        name={"type": "string", "description": "the lane as stored"},
        key={"type": ["string", "null"], "description": "null: one debounce for the workflow"},
        workflow={"type": ["string", "null"]},
        namespace={
            "type": ["string", "null"],
            "description": "the namespace whose own lane it is (null: shared by every namespace)",
        },
        run=_ref("RunSummary"),
        first_at=_TIME,
        fires_at=_MAYBE_TIME,
    ),
    "QueueEntry": _object(
        ["run_id", "seq", "priority", "fairness_key", "admitted_at", "denials"],
        run_id={"type": "string"},
        seq={"type": "integer", "description": "the step's sequence number in its run"},
        priority={"type": "integer"},
        fairness_key={"type": "string"},
        admitted_at={"type": ["string", "null"], "format": "date-time"},
        denials={"type": "integer", "description": "times it was turned away so far"},
    ),
    "QueueLane": _object(
        ["kind", "name", "concurrency", "usage", "rate", "fairness", "order", "holders", "waiters"],
        kind={"type": "string", "enum": ["queue"]},
        name={"type": "string"},
        concurrency={"type": ["integer", "null"]},
        usage={"type": "integer", "description": "steps holding a slot"},
        rate={
            "type": ["object", "null"],
            "description": "the fixed rate window: limit per period seconds, used so far",
            "properties": {
                "limit": {"type": "integer"},
                "period": {"type": "number"},
                "window_start": {"type": ["string", "null"], "format": "date-time"},
                "used": {"type": "integer"},
            },
        },
        fairness={"type": "string", "enum": ["fifo", "key"]},
        order={"type": "string", "enum": ["fifo", "lifo"]},
        holders={"type": "array", "items": _ref("QueueEntry")},
        waiters={
            "type": "array",
            "items": _ref("QueueEntry"),
            "description": "in admission order",
        },
    ),
}


def _operations() -> JSONObject:
    signal = _path_param("name", "the signal's name")
    return {
        "/healthz": {
            "get": {
                "summary": "liveness; needs no token",
                "security": [],
                "responses": {"200": _json(_object(["ok"], ok={"type": "boolean"}), "alive")},
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus text: this process's counters, the store's gauges",
                "responses": _responses(
                    {
                        "200": {
                            "description": "the metrics, in the Prometheus text format",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        }
                    }
                ),
            }
        },
        "/runs": {
            "get": {
                "summary": "runs, newest first, a page at a time",
                "description": _ATTRIBUTE_FILTERS,
                "parameters": [
                    _query("id", {"type": "string"}, "only the run of this id (if it matches)"),
                    *_FILTERS,
                    _query(
                        "limit", {"type": "integer", "minimum": 1, "maximum": MAX_PAGE}, "page size"
                    ),
                    _query("cursor", {"type": "string"}, "next_cursor of the previous page"),
                ],
                "responses": _responses(
                    {
                        "200": _json(
                            _object(
                                ["runs", "next_cursor"],
                                runs={"type": "array", "items": _ref("Run")},
                                next_cursor={"type": ["string", "null"]},
                            ),
                            "a page of runs",
                        )
                    },
                    "422",
                ),
            },
            "post": {
                "summary": "start a run (idempotent by run_id)",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("StartRequest")}},
                },
                "responses": _responses(
                    {
                        "201": _json(_ref("Started"), "a new pending run"),
                        "200": _json(
                            _ref("Started"),
                            "the existing run of that run_id, or the debounced run the start"
                            " folded into",
                        ),
                    },
                    "400",
                    "404",
                    "409",
                    "422",
                    "429",
                ),
            },
        },
        "/runs:batch": {
            "post": {
                "summary": "start many runs in one store round trip, each as POST /runs would",
                "description": (
                    "Each start is admitted exactly as a POST /runs of it would be, in the"
                    " list's order (a singleton's line, quotas, rate limits, idempotent run"
                    " ids); a refused one is answered in its place and the others go ahead."
                ),
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("BatchRequest")}},
                },
                "responses": _responses(
                    {"200": _json(_ref("BatchAnswer"), "one answer per start, in order")},
                    "400",
                    "422",
                ),
            },
        },
        "/stats/runs": {
            "get": {
                "summary": "how many runs match the filters, by status",
                "description": _ATTRIBUTE_FILTERS,
                "parameters": _FILTERS,
                "responses": _responses(
                    {
                        "200": _json(
                            _object(
                                ["counts", "total"],
                                counts={
                                    "type": "object",
                                    "additionalProperties": {"type": "integer"},
                                },
                                total={"type": "integer"},
                            ),
                            "counts by status",
                        )
                    },
                    "422",
                ),
            }
        },
        "/runs/{run_id}": {
            "get": {
                "summary": "a run with its steps and children (a browser gets its page)",
                "parameters": [_RUN_ID],
                "responses": _responses(
                    {
                        "200": _json(
                            {
                                "allOf": [
                                    _ref("Run"),
                                    _object(
                                        ["steps", "children", "waiting_for"],
                                        steps={"type": "array", "items": _ref("Step")},
                                        children={"type": "array", "items": _ref("RunSummary")},
                                        waiting_for={
                                            "type": ["object", "null"],
                                            "description": "what an active run waits for:"
                                            " kind (sleep, signal, update, event, child, retry,"
                                            " worker, slot, queue, throttle, debounce, remote_turn,"
                                            " turn, engine, admission, all), reason, and"
                                            " the kind's fields (until, name, lane, position,"
                                            " ...); null once settled",
                                        },
                                    ),
                                ]
                            },
                            "the run",
                        )
                    },
                    "404",
                ),
            }
        },
        "/runs/{run_id}/cancel": {
            "post": {
                "summary": "cancel a run and its children",
                "parameters": [_RUN_ID],
                "responses": _responses(
                    {
                        "200": _json(
                            _object(
                                ["run_id", "cancelled"],
                                run_id={"type": "string"},
                                cancelled={"type": "boolean"},
                            ),
                            "cancelled is false when the run had already finished",
                        )
                    },
                    "404",
                ),
            }
        },
        "/runs/{run_id}/pause": _control(
            "pause a run: the step in flight finishes, then it takes no further turn",
            "paused",
            "paused is false when the run is not active, or paused already",
        ),
        "/runs/{run_id}/resume": _control(
            "resume a paused run: it is due now",
            "resumed",
            "resumed is false when the run is not paused",
        ),
        "/runs/{run_id}/fork": {
            "post": {
                "summary": "fork a run: a new run reusing its recorded results before from_seq",
                "parameters": [_RUN_ID],
                "requestBody": {
                    "required": False,
                    "content": {"application/json": {"schema": _ref("ForkRequest")}},
                },
                "responses": _responses(
                    {
                        "201": _json(_ref("Run"), "the fork, a new run"),
                        "200": _json(_ref("Run"), "the fork of that run_id, asked again"),
                    },
                    "400",
                    "404",
                    "409",
                    "422",
                    "429",
                ),
            }
        },
        "/runs/{run_id}/retry": {
            "post": {
                "summary": "requeue a failed, dead or cancelled run from its checkpoints",
                "parameters": [_RUN_ID],
                "responses": _responses(
                    {"200": _json(_ref("Run"), "the run, pending again")}, "404", "409", "429"
                ),
            }
        },
        "/runs/{run_id}/signal/{name}": {
            "post": {
                "summary": "send a signal; the body (any JSON, or empty) is its payload",
                "parameters": [_RUN_ID, signal],
                "requestBody": {
                    "required": False,
                    "content": {"application/json": {"schema": _ANY}},
                },
                "responses": _responses(
                    {
                        "202": _json(
                            _object(
                                ["run_id", "signal", "delivered"],
                                run_id={"type": "string"},
                                signal={"type": "string"},
                                delivered={"type": "boolean"},
                            ),
                            "delivered or buffered",
                        )
                    },
                    "400",
                    "404",
                    "409",
                    "422",
                ),
            }
        },
        "/runs/{run_id}/updates/{name}": {
            "post": {
                "summary": "send an update and answer the workflow's reply to it",
                "description": "The run's body takes the update with ctx.wait_for_update(name)"
                " and answers with ctx.reply. 409 update_rejected: the body rejected it (the"
                " message is its reason), or the run ended without answering it; 504"
                " update_timeout: no answer within the timeout (the update stays delivered).",
                "parameters": [
                    _RUN_ID,
                    _path_param("name", "the update's name"),
                    _query(
                        "timeout",
                        {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_UPDATE_TIMEOUT},
                        f"seconds to wait for the reply (default {UPDATE_TIMEOUT:g})",
                    ),
                ],
                "requestBody": {
                    "required": False,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": ["object", "null"],
                                "properties": {"payload": _ANY},
                                "additionalProperties": False,
                            }
                        }
                    },
                },
                "responses": _responses(
                    {
                        "200": _json(
                            _object(
                                ["run_id", "update", "reply"],
                                run_id={"type": "string"},
                                update={"type": "string"},
                                reply=_ANY,
                            ),
                            "the workflow's reply",
                        ),
                        "504": _ERROR,
                    },
                    "400",
                    "404",
                    "409",
                    "422",
                ),
            }
        },
        "/events/{name}": {
            "post": {
                "summary": "publish an event; the body is its payload",
                "parameters": [
                    _path_param("name", "the event's name"),
                    _query("id", {"type": "string"}, "idempotency key"),
                ],
                "requestBody": {
                    "required": False,
                    "content": {"application/json": {"schema": _ANY}},
                },
                "responses": _responses(
                    {
                        "202": _json(
                            _object(
                                ["event", "touched"],
                                event={"type": "string"},
                                touched={"type": "integer"},
                            ),
                            "how many runs it woke or started",
                        )
                    },
                    "400",
                    "422",
                ),
            }
        },
        "/schedules": {
            "get": {
                "summary": "every schedule: its definition, next fire and last fire",
                "responses": _responses(
                    {
                        "200": _json(
                            _object(
                                ["schedules"],
                                schedules={"type": "array", "items": _ref("Schedule")},
                            ),
                            "the schedules, by id",
                        )
                    }
                ),
            }
        },
        "/schedules/{schedule_id}/{action}": {
            "post": {
                "summary": "pause or resume a schedule, or trigger one run of it now",
                "parameters": [
                    _path_param("schedule_id", "the schedule"),
                    {
                        "name": "action",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string", "enum": ["pause", "resume", "trigger"]},
                    },
                ],
                "responses": _responses(
                    {
                        "200": _json(_ref("Schedule"), "paused or resumed"),
                        "201": _json(_ref("Run"), "trigger: the run started"),
                    },
                    "404",
                    "429",
                ),
            }
        },
        "/engines": {
            "get": {
                "summary": "the engines announced in the store, what each serves, and the "
                "active runs of codes no live engine serves",
                "responses": _responses(
                    {
                        "200": _json(
                            _object(
                                ["engines", "unserved"],
                                engines={"type": "array", "items": _ref("Engine")},
                                unserved={
                                    "type": "array",
                                    "items": _object(
                                        ["workflow", "version", "runs"],
                                        workflow={"type": "string"},
                                        version={"type": "string"},
                                        runs={"type": "integer"},
                                    ),
                                },
                            ),
                            "every engine record, oldest first",
                        )
                    }
                ),
            }
        },
        "/lanes/history": _read(
            "each lane's usage and waiters over time, as this server sampled them (every"
            " interval seconds, the last keep samples, since it started)",
            _object(
                ["interval", "keep", "times", "lanes"],
                interval={"type": "number"},
                keep={"type": "integer"},
                times={"type": "array", "items": _TIME},
                lanes={"type": "array", "items": _ref("LaneSeries")},
            ),
            "the samples' times, and each lane's points [sample, usage, waiting]",
        ),
        "/overview": _read(
            "the last hour from the store: runs started and settled each minute, failures,"
            " latency; the active runs by status",
            _object(
                ["since", "until", "totals", "active", "latency", "minutes"],
                since=_TIME,
                until=_TIME,
                totals={"type": "object"},
                active={"type": "object"},
                latency={"type": "object"},
                minutes={"type": "array", "items": {"type": "object"}},
            ),
            "the overview",
        ),
        "/workers": _read(
            "this server's engine (what it serves, its turns in flight) and the workers its"
            " transport heard announce themselves",
            _object(
                ["engine", "workers"],
                engine={"type": "object"},
                workers={"type": "array", "items": {"type": "object"}},
            ),
            "the engine and the workers (their descriptors, docs/wire.md)",
        ),
        "/lanes": {
            "get": {
                "summary": "each singleton lane, quota key and step queue: holders, waiters "
                "in order, usage (a lane's first 3 holders and waiters, and how many there "
                "are; with ?key=, every one); each run-level rate limit (its window) and "
                "debounce",
                "parameters": [
                    _query(
                        "key",
                        {"type": "string"},
                        "only lanes of this key (or queue name, or a limit's workflow)",
                    )
                ],
                "responses": _responses(
                    {
                        "200": _json(
                            _object(
                                ["lanes", "queues", "limits"],
                                lanes={"type": "array", "items": _ref("Lane")},
                                queues={"type": "array", "items": _ref("QueueLane")},
                                limits={
                                    "type": "array",
                                    "items": {"oneOf": [_ref("RateLane"), _ref("DebounceLane")]},
                                },
                            ),
                            "the lanes with active runs, every registered step queue, and"
                            " the rate limits with starts in their window and the debounces"
                            " with a run not begun",
                        )
                    }
                ),
            }
        },
    }


_FORBIDDEN = _json(
    _ref("Error"),
    "forbidden: the token's scope is read, and only a token of scope operate may do this",
)


def _scoped(paths: JSONObject) -> JSONObject:
    """Every operation but a GET needs a token of scope ``operate``: it may answer 403."""
    for methods in paths.values():
        for method, operation in methods.items():
            if method != "get":
                operation["responses"]["403"] = _FORBIDDEN
    return paths


def _access() -> JSONObject:
    entry = _ref("AuditEntry")
    page = _object(
        ["entries", "next_cursor"],
        entries={"type": "array", "items": entry},
        next_cursor={"type": ["string", "null"]},
    )
    limit = {"type": "integer", "minimum": 1, "maximum": MAX_PAGE}
    return {
        "/whoami": _read(
            "the caller's token: its name and scope (anonymous, operate: an API without tokens)",
            _object(
                ["name", "scope"],
                name={"type": "string"},
                scope={"type": "string", "enum": ["read", "operate"]},
            ),
            "who is asking",
        ),
        "/audit": {
            "get": {
                "summary": "the audit log, newest first: every action taken through this API"
                " or the command line",
                "parameters": [
                    _query("limit", limit, "page size"),
                    _query("cursor", {"type": "string"}, "next_cursor of the previous page"),
                ],
                "responses": _responses({"200": _json(page, "a page of the log")}, "422"),
            }
        },
    }


def openapi() -> JSONObject:
    """The document: every endpoint of the API (the dashboard's pages are not part of it)."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "runlane", "version": __version__},
        "paths": _scoped({**_operations(), **_access()}),
        "components": {
            "schemas": _SCHEMAS,
            "securitySchemes": {"token": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"token": []}],
    }


__all__ = ["openapi"]
