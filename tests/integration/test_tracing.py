"""OpenTelemetry: a run is one trace, each turn and step a span with the run id, workflow and
attempt; a remote worker's step span joins the run's trace through the task message, on every
transport. Spans go to the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import runlane
from runlane import Engine
from runlane.remote.worker import Worker
from runlane.stores import MemoryStore
from runlane.tracing import Tracing, run_trace_ids
from runlane.transports import Transport
from tests.contract import test_transport_contract as contract

transport_kind = contract.transport_kind
make_transport = contract.make_transport
transport = contract.transport


def recorder() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@runlane.step(name="trace.add")
def add(n: int) -> int:
    return n + 1


@runlane.step(name="trace.remote_double", group="trace")
def remote_double(n: int) -> int:
    return n * 2


@runlane.workflow(name="traced")
async def traced(ctx: runlane.Context, input: Any) -> Any:
    first = await ctx.step(add, input)
    await ctx.sleep(0.01)
    return await ctx.step(add, first)


@runlane.workflow(name="traced_remote")
async def traced_remote(ctx: runlane.Context, input: Any) -> Any:
    return await ctx.step(remote_double, input)


def named(spans: tuple[ReadableSpan, ...], prefix: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name.startswith(prefix)]


async def test_a_runs_turns_and_steps_are_spans_of_one_trace() -> None:
    provider, exporter = recorder()
    engine = Engine(MemoryStore(), workflows=[traced], poll_interval=0.01, tracer_provider=provider)
    async with engine:
        await engine.start("traced", 1, "run-1")
        assert (await engine.wait_for_run("run-1", timeout=5)).output == 3
    spans = exporter.get_finished_spans()
    turns, steps = named(spans, "runlane.turn traced"), named(spans, "runlane.step trace.add")
    assert len(turns) == 2 and len(steps) == 2
    trace_id, root = run_trace_ids("run-1")
    assert {span.context.trace_id for span in spans} == {trace_id}
    assert {span.parent.span_id for span in turns if span.parent} == {root}
    turn_ids = {turn.context.span_id for turn in turns}
    assert {step.parent.span_id for step in steps if step.parent} == turn_ids
    attributes = dict(turns[0].attributes or {})
    assert attributes == {
        "runlane.run_id": "run-1",
        "runlane.workflow": "traced",
        "runlane.attempt": 1,
    }
    assert dict(steps[0].attributes or {})["runlane.attempt"] == 1


async def test_a_remote_workers_step_span_joins_the_runs_trace(transport: Transport) -> None:
    engine_provider, engine_spans = recorder()
    worker_provider, worker_spans = recorder()  # as in another process
    engine = Engine(
        MemoryStore(),
        transport=transport,
        workflows=[traced_remote],
        poll_interval=0.05,
        tracer_provider=engine_provider,
    )
    worker = Worker(
        "trace",
        transport,
        steps=[remote_double],
        poll_timeout=0.1,
        heartbeat_interval=0.1,
        tracer_provider=worker_provider,
    )
    running = asyncio.create_task(worker.run())
    try:
        async with engine:
            await engine.start("traced_remote", 21, "remote-1")
            assert (await engine.wait_for_run("remote-1", timeout=10)).output == 42
    finally:
        await worker.stop()
        await running
    [remote] = worker_spans.get_finished_spans()
    trace_id, _ = run_trace_ids("remote-1")
    assert remote.name == "runlane.step trace.remote_double"
    assert remote.context.trace_id == trace_id
    dispatching = engine_spans.get_finished_spans()[0]
    assert remote.parent is not None and remote.parent.span_id == dispatching.context.span_id
    assert dict(remote.attributes or {})["runlane.run_id"] == "remote-1"


async def test_without_a_provider_nothing_is_traced_and_runs_go_on() -> None:
    engine = Engine(MemoryStore(), workflows=[traced], poll_interval=0.01)
    async with engine:
        await engine.start("traced", 1, "quiet")
        assert (await engine.wait_for_run("quiet", timeout=5)).output == 3
    assert engine._execution.tracing.carrier() is None


def test_tracing_is_off_until_the_application_has_imported_opentelemetry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    provider, exporter = recorder()
    monkeypatch.delitem(sys.modules, "opentelemetry.trace")  # as if never imported
    tracing = Tracing(provider)
    with tracing.turn("r", "wf", 1) as span:
        assert span is None
    assert tracing.carrier() is None
    monkeypatch.undo()
    with tracing.turn("r", "wf", 1) as span:
        assert span is not None
    assert [s.name for s in exporter.get_finished_spans()] == ["runlane.turn wf"]
