"""The public door: exactly these names, importable as the README and the reference show."""

from __future__ import annotations

import runlane

EXPECTED = {
    "DEFAULT_CONCURRENCY_STATUSES",
    "ChildFailedError",
    "Codec",
    "Concurrency",
    "ConcurrencyLimitError",
    "ConfigurationError",
    "Context",
    "Debounce",
    "DefinitionError",
    "Engine",
    "EventTimeoutError",
    "FatalError",
    "GatherError",
    "KeyFunctionError",
    "MissingExtraError",
    "NonDeterminismError",
    "NotInStepError",
    "PayloadCodecError",
    "RateLimit",
    "RateLimitError",
    "RemoteWorkflow",
    "Retention",
    "Retry",
    "Run",
    "RunExistsError",
    "RunFinishedError",
    "RunNotFoundError",
    "RunStatus",
    "RunlaneError",
    "Schedule",
    "ScheduleNotFoundError",
    "ScheduleState",
    "SerializationError",
    "Settled",
    "SignalTimeoutError",
    "Singleton",
    "SingletonQueueFullError",
    "Start",
    "StartOutcome",
    "StepContext",
    "StepQueue",
    "StepRecord",
    "StepTimeoutError",
    "StoreUnavailableError",
    "UnknownWorkflowError",
    "UnsupportedStoreError",
    "Update",
    "UpdateRejectedError",
    "UpdateTimeoutError",
    "Worker",
    "step",
    "step_context",
    "workflow",
}


def test_the_package_exports_exactly_the_public_names() -> None:
    assert set(runlane.__all__) == EXPECTED
    for name in runlane.__all__:
        assert hasattr(runlane, name), name


def test_every_error_derives_from_the_one_root() -> None:
    for name in runlane.__all__:
        obj = getattr(runlane, name)
        if isinstance(obj, type) and issubclass(obj, Exception) and obj is not runlane.RunlaneError:
            assert issubclass(obj, runlane.RunlaneError), name


def test_stores_and_test_kit_import_as_documented() -> None:
    from runlane.stores import MemoryStore, PostgresStore, SqliteStore, open_store  # noqa: F401
    from runlane.testing import ManualClock
    from runlane.transports import (  # noqa: F401
        DbTransport,
        InProcessTransport,
        RedisTransport,
        open_transport,
    )

    assert isinstance(open_store("memory://"), MemoryStore)
    assert ManualClock().now().tzinfo is not None


def test_run_statuses_are_strings_with_active_and_terminal_sets() -> None:
    from runlane.models import ACTIVE_STATUSES, TERMINAL_STATUSES

    assert runlane.RunStatus("pending") == "pending"
    assert {s.value for s in ACTIVE_STATUSES} == {
        "pending",
        "running",
        "suspended",
        "blocked",
        "paused",
        "cancelling",
    }
    assert {s.value for s in TERMINAL_STATUSES} == {"completed", "failed", "cancelled", "dead"}
