"""Definitions are validated when decorated, so mistakes fail at import time."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import runlane
from runlane import Concurrency, Retry, Singleton
from runlane.definitions import step_definition
from runlane.errors import DefinitionError
from runlane.registry import Registry


def test_a_sync_workflow_body_is_rejected_at_decoration() -> None:
    with pytest.raises(DefinitionError, match="async def"):

        @runlane.workflow(name="sync-body")
        def body(ctx: Any, input: Any) -> None:
            return None


def test_a_second_registration_of_the_same_name_and_version_is_an_error() -> None:
    @runlane.workflow(name="twice")
    async def first(ctx: Any, input: Any) -> None:
        return None

    @runlane.workflow(name="twice")
    async def second(ctx: Any, input: Any) -> None:
        return None

    @runlane.workflow(name="twice", version="2")
    async def newer(ctx: Any, input: Any) -> None:
        return None

    with pytest.raises(DefinitionError, match="already registered"):
        Registry([first, second])
    registry = Registry([first, newer])
    assert registry.workflow("twice").version == "2"
    assert registry.workflow("twice", "1").fn is first


@runlane.step
def helper(x: int) -> int:
    return x


def test_bare_decorators_use_the_function_name() -> None:
    @runlane.workflow
    async def plain(ctx: Any, input: Any) -> None:
        return None

    assert Registry([plain]).workflow("plain").name == "plain"
    assert step_definition(helper).name == f"{__name__}.helper"
    assert helper(3) == 3  # a decorated step stays a plain callable


def test_a_step_defined_inside_a_function_needs_a_name() -> None:
    with pytest.raises(DefinitionError, match="inside a function: give it a name="):

        @runlane.step
        def nested(x: int) -> int:
            return x

    @runlane.step(name="nested.named")
    def named(x: int) -> int:
        return x

    assert step_definition(named).name == "nested.named"


@pytest.mark.parametrize(
    "body",
    [
        lambda a, b: None,
        lambda *, input: None,
    ],
)
def test_a_step_must_take_one_input(body: Any) -> None:
    with pytest.raises(DefinitionError, match="a step takes one input, or none"):
        runlane.step(name="arity")(body)


def test_a_step_with_defaults_or_star_args_is_accepted() -> None:
    runlane.step(name="defaults")(lambda input, extra=1: input)
    runlane.step(name="star")(lambda *args: args)
    runlane.step(name="no-input")(lambda: None)  # called without its (None) input


def test_a_workflow_body_must_take_ctx_and_input() -> None:
    with pytest.raises(DefinitionError, match="takes \\(ctx, input\\)"):

        @runlane.workflow(name="one-arg")
        async def one(ctx: Any) -> None:
            return None

    with pytest.raises(DefinitionError, match="takes \\(ctx, input\\)"):

        @runlane.workflow(name="three-args")
        async def three(ctx: Any, input: Any, extra: Any) -> None:
            return None


def test_options_are_validated() -> None:
    with pytest.raises(DefinitionError):
        Singleton(key=lambda i: "k", limit=0)
    with pytest.raises(DefinitionError):
        Singleton(key=lambda i: "k", on_busy="drop")  # type: ignore[arg-type]
    with pytest.raises(DefinitionError):
        Concurrency(key="k", limit=1, count_statuses=["completed"])
    with pytest.raises(ValueError):
        Retry(max_attempts=0)
    with pytest.raises(DefinitionError, match="reserved"):
        runlane.workflow(name="x", tags=["runlane:holder"])
    assert Singleton(key=lambda i: "k", on_busy="reject").queue_depth == 0


@pytest.mark.parametrize(
    "make",
    [
        lambda: runlane.RateLimit(limit=0, period=60),
        lambda: runlane.RateLimit(limit=True, period=60),
        lambda: runlane.RateLimit(limit=2.5, period=60),  # type: ignore[arg-type]
        lambda: runlane.RateLimit(limit=1, period=0),
        lambda: runlane.RateLimit(limit=1, period="60"),  # type: ignore[arg-type]
        lambda: runlane.RateLimit(limit=1, period=60, key="tenant"),  # type: ignore[arg-type]
        lambda: runlane.RateLimit(limit=1, period=60, on_limit="queue"),  # type: ignore[arg-type]
        lambda: runlane.Debounce(key=lambda i: "k", period=-1),
        lambda: runlane.Debounce(key="doc", period=5),  # type: ignore[arg-type]
        lambda: runlane.Debounce(key=lambda i: "k", period=10, max_wait=5),
        lambda: runlane.workflow(rate_limit=Concurrency(key="k", limit=1)),  # type: ignore[call-overload]
        lambda: runlane.workflow(debounce=runlane.RateLimit(limit=1, period=1)),  # type: ignore[call-overload]
    ],
)
def test_rate_limits_and_debounces_are_validated(make: Any) -> None:
    with pytest.raises(DefinitionError):
        built = make()
        if callable(built) and not isinstance(built, runlane.RateLimit | runlane.Debounce):

            @built  # type: ignore[untyped-decorator]
            async def body(ctx: Any, input: Any) -> None:
                return None


def test_rate_limit_and_debounce_windows_are_seconds() -> None:
    limit = runlane.RateLimit(limit=3, period=timedelta(minutes=1), on_limit="delay")
    debounce = runlane.Debounce(key=None, period=timedelta(seconds=5), max_wait=30)
    assert (limit.period, debounce.period, debounce.max_wait) == (60.0, 5.0, 30.0)

    @runlane.workflow(name="limited", rate_limit=limit, debounce=debounce)
    async def limited(ctx: Any, input: Any) -> None:
        return None

    definition = Registry([limited]).workflow("limited")
    assert (definition.rate_limit, definition.debounce) == (limit, debounce)


def test_durations_accept_seconds_or_timedeltas() -> None:
    @runlane.workflow(name="timed", execution_timeout=timedelta(minutes=2))
    async def timed(ctx: Any, input: Any) -> None:
        return None

    assert Registry([timed]).workflow("timed").execution_timeout == 120.0


def test_retry_backoff_grows_exponentially_with_jitter_and_a_cap() -> None:
    retry = Retry(max_attempts=10, backoff=1.0, max_backoff=8.0, jitter=0.2)
    assert 0.8 <= retry.delay(1) <= 1.0
    assert 3.2 <= retry.delay(3) <= 4.0
    assert 6.4 <= retry.delay(9) <= 8.0


def test_retry_in_is_none_once_attempts_run_out_or_for_a_fatal_error() -> None:
    retry = Retry(max_attempts=3, backoff=1.0, jitter=0.0)
    assert retry.retry_in(1, fatal=False) == 1.0
    assert retry.retry_in(3, fatal=False) is None
    assert retry.retry_in(1, fatal=True) is None


def test_engine_rejects_unknown_options() -> None:
    with pytest.raises(TypeError, match="unknown engine option"):
        runlane.Engine("memory://", leese=3)  # type: ignore[call-arg]  # a typo, as untyped code makes it


def test_failure_handlers_are_workflow_names_or_decorated_workflows() -> None:
    @runlane.workflow(name="alert")
    async def alert(ctx: Any, info: Any) -> None:
        return None

    @runlane.workflow(name="order", on_failure=alert, dead_letter="bury")
    async def order(ctx: Any, input: Any) -> None:
        return None

    definition = Registry([order, alert, _bury()]).workflow("order")
    assert (definition.on_failure, definition.dead_letter) == ("alert", "bury")

    def plain(ctx: Any, info: Any) -> None:
        return None

    for wrong in (plain, "", 3):
        with pytest.raises(DefinitionError, match="on_failure= takes a workflow name"):
            runlane.workflow(name="x", on_failure=wrong)  # type: ignore[arg-type]
    with pytest.raises(DefinitionError, match="its own failure handler"):

        @runlane.workflow(name="loop", dead_letter="loop")
        async def loop(ctx: Any, input: Any) -> None:
            return None


def test_a_remote_workflow_declaration_names_its_handlers_like_a_decorated_one() -> None:
    declared = runlane.RemoteWorkflow("ingest", "wf", on_failure="alert", dead_letter="bury")
    assert (declared.on_failure, declared.dead_letter) == ("alert", "bury")
    assert declared.handler(runlane.RunStatus.DEAD) == "bury"
    with pytest.raises(DefinitionError, match="dead_letter= takes a workflow name"):
        runlane.RemoteWorkflow("ingest", "wf", dead_letter="")
    with pytest.raises(DefinitionError, match="its own failure handler"):
        runlane.RemoteWorkflow("ingest", "wf", dead_letter="ingest")


def _bury() -> Any:
    @runlane.workflow(name="bury")
    async def bury(ctx: Any, info: Any) -> None:
        return None

    return bury


def test_an_engine_refuses_a_failure_handler_it_does_not_register() -> None:
    @runlane.workflow(name="order", on_failure="alert")
    async def order(ctx: Any, input: Any) -> None:
        return None

    with pytest.raises(DefinitionError, match="'alert' as a failure handler"):
        runlane.Engine("memory://", workflows=[order])


def test_an_engine_registers_the_failure_handlers_given_as_workflows() -> None:
    @runlane.workflow(name="notify")
    async def notify(ctx: Any, info: Any) -> None:
        return None

    @runlane.workflow(name="notify", version="2")
    async def notify_v2(ctx: Any, info: Any) -> None:
        return None

    @runlane.workflow(name="job", on_failure=notify)
    async def job(ctx: Any, input: Any) -> None:
        return None

    assert Registry([job]).workflow("notify").fn is notify
    assert Registry([job, notify_v2]).workflow("notify").fn is notify_v2


def test_the_engines_typed_knobs_are_exactly_its_options() -> None:
    from dataclasses import fields

    from runlane.options import EngineKnobs, EngineOptions

    assert set(EngineKnobs.__annotations__) == {f.name for f in fields(EngineOptions)}
