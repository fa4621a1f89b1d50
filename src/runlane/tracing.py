"""OpenTelemetry traces: a run is a trace, each turn and each step a span in it.

Needs the ``otel`` extra and a tracer provider: the one given to the engine or worker
(``tracer_provider=``), else the global one once the application has configured it. Without
either, every call here returns a shared no-op context manager after one dictionary lookup
(``sys.modules``): runlane itself never imports OpenTelemetry.

Every process agrees on a run's trace without storing anything: the trace id, and the id of
the run's own (never recorded) root span, are derived from the run id. Each turn is a span under
that root, its steps are spans under the turn, and a remote step's task carries the dispatching
turn's W3C trace context in its ``trace`` field (docs/wire.md), so the worker's step span joins
the run's trace as a child of that turn.
"""

from __future__ import annotations

import contextlib
import hashlib
import sys
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any

from .transports.base import Message

_OFF: AbstractContextManager[None] = contextlib.nullcontext()


class Tracing:
    """The spans of one engine or worker; ``provider`` None means the global provider."""

    def __init__(self, provider: Any = None) -> None:
        self._provider = provider
        self._tracer: Any = None

    def _active(self) -> Any:
        """The tracer, or None while tracing is off (no extra, no provider configured)."""
        if self._tracer is not None:
            return self._tracer
        # An application that configured a global provider has imported the API itself; runlane
        # never imports it first, so an engine without tracing loads no optional package.
        trace = sys.modules.get("opentelemetry.trace")
        if trace is None:
            return None
        provider = self._provider or trace.get_tracer_provider()
        if isinstance(provider, trace.ProxyTracerProvider):
            # The application has not set a provider yet; this one records nothing. Look
            # again next time rather than keep a tracer that never will.
            return None
        self._tracer = provider.get_tracer("runlane")
        return self._tracer

    def turn(self, run_id: str, workflow: str, attempt: int) -> AbstractContextManager[Any]:
        """The span of one turn of a run, in the run's trace."""
        tracer = self._active()
        if tracer is None:
            return _OFF
        return _span(
            tracer,
            f"runlane.turn {workflow}",
            _run_root(run_id),
            {"runlane.run_id": run_id, "runlane.workflow": workflow, "runlane.attempt": attempt},
        )

    def step(
        self, run_id: str, workflow: str, name: str, seq: int, attempt: int
    ) -> AbstractContextManager[Any]:
        """The span of one local step attempt, under the current turn's span."""
        tracer = self._active()
        if tracer is None:
            return _OFF
        attributes = {
            "runlane.run_id": run_id,
            "runlane.workflow": workflow,
            "runlane.step": name,
            "runlane.seq": seq,
            "runlane.attempt": attempt,
        }
        return _span(tracer, f"runlane.step {name}", None, attributes)

    def carrier(self) -> dict[str, str] | None:
        """The current span's W3C trace context, for a task message; None when not tracing."""
        if self._active() is None:
            return None
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        found: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(found)
        return found or None

    def remote_step(self, task: Message) -> AbstractContextManager[Any]:
        """A worker's span for one task, a child of the turn that dispatched it."""
        tracer = self._active()
        if tracer is None:
            return _OFF
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        given = task.get("trace")
        parent = (
            TraceContextTextMapPropagator().extract(_texts(given))
            if isinstance(given, Mapping)
            else _run_root(str(task.get("run_id")))
        )
        attributes = {
            "runlane.run_id": str(task.get("run_id")),
            "runlane.step": str(task.get("name")),
            "runlane.seq": _int(task.get("seq")),
            "runlane.attempt": _int(task.get("attempt")),
        }
        return _span(
            tracer, f"runlane.step {task.get('name')}", parent, attributes, kind="consumer"
        )


@contextlib.contextmanager
def _span(
    tracer: Any, name: str, parent: Any, attributes: dict[str, Any], kind: str = "internal"
) -> Iterator[Any]:
    from opentelemetry import trace

    span_kind = trace.SpanKind.CONSUMER if kind == "consumer" else trace.SpanKind.INTERNAL
    with tracer.start_as_current_span(
        name, context=parent, kind=span_kind, attributes=attributes
    ) as span:
        yield span


def run_trace_ids(run_id: str) -> tuple[int, int]:
    """The trace id of a run and the span id of its root, derived from the run id alone."""
    digest = hashlib.sha256(run_id.encode()).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1  # an all-zero id is invalid
    span_id = int.from_bytes(digest[16:24], "big") or 1
    return trace_id, span_id


def _run_root(run_id: str) -> Any:
    from opentelemetry import trace

    trace_id, span_id = run_trace_ids(run_id)
    root = trace.SpanContext(
        trace_id, span_id, is_remote=True, trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED)
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(root))


def _texts(given: Mapping[Any, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in given.items() if isinstance(v, str)}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


__all__ = ["Tracing", "run_trace_ids"]
