"""Payloads through a codec: what is encoded, how an encoded payload is stored, and reading it.

A *payload* is a value a workflow's code gives or receives: a run's input and output, a step's
input and output, a signal's, an event's and an update's payload, a reply, a value recorded by
``ctx.side_effect`` or ``ctx.now``, a schedule's input, and the message and traceback of an
error. An engine or worker with a codec encodes each one as it leaves for the store or the
wire, and decodes it as it comes back. Everything the engine and the stores decide by stays in
clear: ids, names, keys, tags, statuses, times, counts, an error's ``type`` and ``fatal`` flag,
and the references a record's ``input`` holds for kinds other than ``step`` (a child's id, an
event wait's position, the id of the update a reply answers: stores look these up).

An encoded payload is a JSON object with the one key ``$encoded``, whose value is the codec's
output in base64 (RFC 4648, with padding)::

    {"$encoded": "Z0FBQUFBQm..."}

so a JSON column stays JSON and a payload from before the codec (anything else) reads as it
is. An encoded error keeps ``type`` and ``fatal`` beside ``$encoded``, which holds the rest of
the error object. No value a workflow gives may itself be an object with a ``$encoded`` key
(``SerializationError``).

Reading strictly (the engine's turns and its API), a payload that does not decode raises
``PayloadCodecError`` naming whose it is; reading leniently (views: the HTTP API, the console,
the command line), it is left in its stored form, which views show as ``"encrypted"``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from .codecs import Codec
from .errors import PayloadCodecError
from .models import (
    JSON,
    Claim,
    Event,
    Run,
    RunSpec,
    Settlement,
    Signal,
    StepKind,
    StepRecord,
    StoredSchedule,
    Writes,
    evolved,
)
from .serialization import ENCODED, dumps

ENCRYPTED = "encrypted"
"""What a view shows in place of a payload it cannot decode (the JSON string)."""

CLEAR_ERROR_KEYS = ("type", "fatal")
"""What stays in clear of an encoded error: what the engine decides a retry by, and what an
operator without the key can still tell."""

NO_CODEC = "it is encoded, and this side has no codec"

T = TypeVar("T")


def encoded(value: Any) -> bool:
    """Whether ``value`` is an encoded payload (or error) as stored."""
    return type(value) is dict and ENCODED in value


def shown(value: Any) -> Any:
    """A payload as a view shows it: ``"encrypted"`` when it is still encoded."""
    return ENCRYPTED if encoded(value) else value


def shown_error(error: Any) -> Any:
    """An error as a view shows it: one still encoded keeps its clear keys, its message
    ``"encrypted"``."""
    if not encoded(error):
        return error
    clear = {k: v for k, v in error.items() if k != ENCODED}
    return {**clear, "message": ENCRYPTED}


def shown_run(run: Run) -> Run:
    """A run as a view shows it (see ``shown``)."""
    return evolved(
        run, input=shown(run.input), output=shown(run.output), error=shown_error(run.error)
    )


def shown_record(record: StepRecord) -> StepRecord:
    """A step record as a view shows it (see ``shown``)."""
    return replace(
        record,
        input=shown(record.input),
        output=shown(record.output),
        error=shown_error(record.error),
    )


def subject_of_run(run_id: str) -> str:
    return f"run {run_id!r}"


class Payloads:
    """A codec applied to payloads (``seal`` on the way out, ``open`` on the way in).

    ``strict``: a payload that does not decode raises ``PayloadCodecError``; otherwise it is
    returned in its stored form (for views). With no codec, ``seal`` changes nothing and
    ``open`` refuses (or, leniently, leaves) an encoded payload."""

    def __init__(self, codec: Codec | None, *, strict: bool = True) -> None:
        if codec is not None and not isinstance(codec, Codec):
            raise TypeError(f"codec= takes an object with encode and decode, not {codec!r}")
        self.codec = codec
        self.strict = strict

    def lenient(self) -> Payloads:
        """The same codec, reading for a view: what does not decode is left as stored."""
        return Payloads(self.codec, strict=False)

    # ---------------------------------------------------------------- one value

    def seal(self, value: JSON) -> JSON:
        if value is None or self.codec is None or encoded(value):
            return value  # null says nothing, and is what most records' unused fields hold
        data = self.codec.encode(dumps(value).encode("utf-8"))
        return {ENCODED: base64.b64encode(data).decode("ascii")}

    def open(self, value: JSON, subject: str, what: str) -> JSON:
        if not encoded(value):
            return value
        try:
            return self._decode(value[ENCODED])
        except _Undecodable as refused:
            if self.strict:
                raise PayloadCodecError(subject, what, str(refused)) from None
            return value

    def _decode(self, text: Any) -> JSON:
        if self.codec is None:
            raise _Undecodable(NO_CODEC)
        try:
            data = base64.b64decode(text, validate=True)
            return json.loads(self.codec.decode(data))
        except Exception as exc:  # bad base64, the codec's refusal (a wrong key), not JSON
            raise _Undecodable(_reason(exc)) from None

    # ---------------------------------------------------------------- errors

    def seal_error(self, error: dict[str, Any] | None) -> dict[str, Any] | None:
        if error is None or self.codec is None or encoded(error):
            return error
        clear = {k: error[k] for k in CLEAR_ERROR_KEYS if k in error}
        hidden = {k: v for k, v in error.items() if k not in CLEAR_ERROR_KEYS}
        sealed: dict[str, Any] = self.seal(hidden)
        return {**clear, **sealed}

    def open_error(self, error: Any, subject: str, what: str) -> Any:
        if not encoded(error):
            return error
        opened = self.open({ENCODED: error[ENCODED]}, subject, what)
        if encoded(opened):
            return error  # left as stored (lenient)
        # Keys beside the envelope were added in clear after it was sealed (a store's
        # ``handler_error``): they stay.
        clear = {k: v for k, v in error.items() if k != ENCODED}
        return {**opened, **clear} if isinstance(opened, dict) else error

    # ---------------------------------------------------------------- records

    def seal_record(self, record: StepRecord) -> StepRecord:
        return replace(
            record,
            input=self.seal(record.input) if record.kind == StepKind.STEP else record.input,
            output=self.seal(record.output),
            error=self.seal_error(record.error),
        )

    def open_record(self, record: StepRecord) -> StepRecord:
        subject = subject_of_run(record.run_id)
        step = f"#{record.seq} ({record.kind} {record.name!r})"
        return replace(
            record,
            input=self.open(record.input, subject, f"input of {step}"),
            output=self.open(record.output, subject, f"output of {step}"),
            error=self.open_error(record.error, subject, f"error of {step}"),
        )

    def open_records(self, records: Sequence[StepRecord]) -> list[StepRecord]:
        return [self.open_record(r) for r in records]

    # ---------------------------------------------------------------- runs and their starts

    def open_run(self, run: Run) -> Run:
        subject = subject_of_run(run.id)
        return evolved(
            run,
            input=self.open(run.input, subject, "input"),
            output=self.open(run.output, subject, "output"),
            error=self.open_error(run.error, subject, "error"),
        )

    def open_runs(self, runs: Sequence[Run]) -> list[Run]:
        return [self.open_run(run) for run in runs]

    def seal_spec(self, spec: RunSpec) -> RunSpec:
        history = tuple(self.seal_record(r) for r in spec.history)
        return replace(spec, input=self.seal(spec.input), history=history)

    def seal_specs(self, specs: Sequence[RunSpec]) -> list[RunSpec]:
        return [self.seal_spec(spec) for spec in specs]

    def seal_writes(self, writes: Writes) -> Writes:
        if not writes.steps and not writes.children:
            return writes
        steps = tuple(self.seal_record(r) for r in writes.steps)
        return replace(writes, steps=steps, children=tuple(self.seal_specs(writes.children)))

    def seal_settlement(self, settlement: Settlement) -> Settlement:
        return replace(
            settlement,
            output=self.seal(settlement.output),
            error=self.seal_error(settlement.error),
            continue_as=self._maybe(self.seal_spec, settlement.continue_as),
            handler=self._maybe(self.seal_spec, settlement.handler),
        )

    def open_claim(self, claim: Claim) -> Claim:
        """The claim decoded; one whose payloads do not decode comes back as stored, with
        ``unreadable`` saying why (its claimer fails the run with that error)."""
        try:
            return Claim(
                self.open_run(claim.run),
                self.open_records(claim.steps),
                [self.open_signal(s) for s in claim.signals],
            )
        except PayloadCodecError as refused:
            return replace(claim, unreadable=refused)

    def unreadable(self, claim: Claim) -> PayloadCodecError | None:
        """Why a claimed run cannot be run here: its payloads did not decode (a codec's
        ``open_claim`` said so), or, without a codec, its input is encoded (only the input is
        looked at: a run an engine with a codec wrote has an encoded input)."""
        if claim.unreadable is not None or self.codec is not None:
            return claim.unreadable
        if not encoded(claim.run.input):
            return None
        return PayloadCodecError(subject_of_run(claim.run.id), "input", NO_CODEC)

    # ---------------------------------------------------------------- messages

    def open_signal(self, signal: Signal) -> Signal:
        what = f"payload of signal {signal.name!r}"
        return replace(
            signal, payload=self.open(signal.payload, subject_of_run(signal.run_id), what)
        )

    def open_event(self, event: Event) -> Event:
        subject = f"event #{event.seq} {event.name!r}"
        return replace(event, payload=self.open(event.payload, subject, "payload"))

    # ---------------------------------------------------------------- schedules

    def seal_schedule(self, schedule: StoredSchedule) -> StoredSchedule:
        return self._schedule(schedule, self.seal)

    def open_schedule(self, schedule: StoredSchedule) -> StoredSchedule:
        """A schedule's input decoded, or left as stored when it does not decode (whatever
        the strictness: a window fired with it makes a run whose claim then fails it, and the
        schedule's next declaration writes it again with this codec)."""
        lenient = self.lenient()
        subject = f"schedule {schedule.id!r}"
        return self._schedule(schedule, lambda value: lenient.open(value, subject, "input"))

    @staticmethod
    def _schedule(schedule: StoredSchedule, change: Callable[[JSON], JSON]) -> StoredSchedule:
        if "input" not in schedule.definition:
            return schedule
        definition = {**schedule.definition, "input": change(schedule.definition["input"])}
        return replace(schedule, definition=definition)

    @staticmethod
    def _maybe(change: Callable[[T], T], value: T | None) -> T | None:
        return None if value is None else change(value)


class _Undecodable(Exception):
    """Why a payload does not decode (its reader names whose payload it is)."""


def _reason(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


__all__ = [
    "CLEAR_ERROR_KEYS",
    "ENCODED",
    "ENCRYPTED",
    "Payloads",
    "encoded",
    "shown",
    "shown_error",
    "shown_record",
    "shown_run",
]
