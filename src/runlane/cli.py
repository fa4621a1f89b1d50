"""The ``runlane`` command line: the demo, the HTTP server, a worker, run administration, migrations.

Every command that touches runs builds a producer-only engine (``drive=False``,
``consumers="never"``): administering runs from a shell must never execute workflow bodies in the
shell's process.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import importlib
import itertools
import json
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.markup import escape

from .attributes import AttributeValue, parse_filters
from .audit import OK, os_user, outcome_of, record
from .cli_tables import (
    attempt_lines,
    audit_table,
    engines_table,
    lanes_table,
    limits_table,
    queues_table,
    run_details,
    runs_table,
    schedules_table,
    steps_table,
    tracebacks,
    unserved_table,
)
from .engine import Engine
from .errors import (
    ConfigurationError,
    MissingExtraError,
    RunExistsError,
    RunlaneError,
    RunNotFoundError,
    SerializationError,
)
from .extras import needs_extra
from .history import ReplayReport, history_doc, replay_stored
from .http.shapes import (
    audit_to_dict,
    engine_to_dict,
    lanes_to_dict,
    replay_to_dict,
    run_to_dict,
    schedule_to_dict,
    step_to_dict,
    unserved_to_list,
)
from .lanes import AllLanes, all_lanes
from .models import ACTIVE_STATUSES, EngineInfo, Run, RunQuery, RunStatus, StepRecord
from .payloads import shown_record, shown_run
from .presence import unserved
from .remote.worker import Worker
from .stores import open_store
from .stores.base import Reads, Store
from .stores.encoded import unwrapped
from .stores.sqlite import SqliteStore
from .urls import SQLITE_URLS

T = TypeVar("T")

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DB_HELP = "Store URL (sqlite:///path, postgresql://...); default $RUNLANE_DATABASE_URL."
APP_HELP = "module:attribute of an Engine (or a callable returning one), for its workflows."
NAMESPACE_HELP = (
    "With --db (without --app): act as an engine of this namespace (--app uses the app"
    " engine's namespace and --scope-reads)."
)
SCOPE_HELP = (
    "With --namespace: see and act on that namespace's runs only (runs, lanes, counts);"
    " a run of another namespace is not found."
)


# ---------------------------------------------------------------- loading APP


def load_object(spec: str) -> Any:
    """Import ``module:attribute`` (dotted attributes allowed) and return the attribute."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise click.BadParameter(f"{spec!r} is not of the form module:attribute", param_hint="APP")
    sys.path.insert(0, os.getcwd())
    importlib.invalidate_caches()
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(
            f"cannot import module {module_name!r}: {exc}", param_hint="APP"
        ) from exc
    finally:
        sys.path.remove(os.getcwd())
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise click.BadParameter(
                f"module {module_name!r} has no attribute {attr!r}", param_hint="APP"
            ) from None
    return obj


def load_engine(spec: str) -> Engine:
    """The Engine named by ``spec``: the attribute itself, or what a zero-argument callable returns."""
    obj = load_object(spec)
    if not isinstance(obj, Engine) and callable(obj) and not _is_worker(obj):
        try:
            obj = obj()
        except Exception as exc:
            raise click.BadParameter(
                f"calling {spec}() to build the engine failed: {type(exc).__name__}: {exc}",
                param_hint="APP",
            ) from exc
    if isinstance(obj, Worker):
        raise click.ClickException(
            f"{spec} is a Worker, not an Engine; use `runlane worker {spec}`"
        )
    if not isinstance(obj, Engine):
        raise click.BadParameter(
            f"{spec} is a {type(obj).__name__}, not a runlane.Engine", param_hint="APP"
        )
    return obj


def _is_worker(obj: Any) -> bool:
    return isinstance(obj, Worker)


def load_runnables(spec: str) -> list[Engine | Worker]:
    """What `runlane worker` runs: a Worker, an Engine, or a list/tuple of them (or a factory)."""
    obj = load_object(spec)
    if callable(obj) and not isinstance(obj, Engine | Worker):
        try:
            obj = obj()
        except Exception as exc:
            raise click.BadParameter(
                f"calling {spec}() failed: {type(exc).__name__}: {exc}", param_hint="APP"
            ) from exc
    items = list(obj) if isinstance(obj, list | tuple) else [obj]
    for item in items:
        if not isinstance(item, Engine | Worker):
            raise click.BadParameter(
                f"{spec} holds a {type(item).__name__}; expected runlane Engine or Worker objects",
                param_hint="APP",
            )
    return items


def store_url(db: str | None, how: str = "pass --db URL") -> str:
    url = db or os.environ.get("RUNLANE_DATABASE_URL")
    if not url:
        raise click.UsageError(f"no database: {how} or set RUNLANE_DATABASE_URL")
    return url if "://" in url else f"sqlite:///{Path(url).resolve()}"


def existing_store(store: Store) -> Store:
    """``store``, if its database exists: administering runs never creates an empty database
    (a mistyped path would otherwise answer "no runs"). ``runlane db upgrade`` creates one."""
    if isinstance(store, SqliteStore) and not Path(store.path).exists():
        raise click.ClickException(
            f"no SQLite database at {Path(store.path).resolve()} ({SQLITE_URLS}); "
            "`runlane db upgrade URL` creates one"
        )
    return store


@dataclass(frozen=True)
class Source:
    """Where a command's engine comes from: the store ``--db`` names, the app ``--app`` names
    (its workflows, its store unless ``--db`` is given, its namespace and scope), and without
    an app, the namespace ``--namespace`` names and whether ``--scope-reads`` fences to it."""

    db: str | None
    app: str | None = None
    namespace: str | None = None
    scope_reads: bool = False

    def check(self) -> None:
        if self.app is not None and (self.namespace is not None or self.scope_reads):
            raise click.UsageError(
                "--namespace and --scope-reads go with --db alone: with --app, the app"
                " engine's namespace and scope are used"
            )
        if self.scope_reads and not self.namespace:
            raise click.UsageError("--scope-reads fences to a namespace: give --namespace NS")


def admin_engine(source: Source) -> Engine:
    """A producer engine on ``--db`` (or the app's store), knowing the app's workflows if given."""
    source.check()
    try:
        if source.app is None:
            store = existing_store(open_store(store_url(source.db)))
            return Engine(
                store=store,
                namespace=source.namespace,
                scope_reads=source.scope_reads,
                drive=False,
                consumers="never",
                announce=False,
            )
        app = load_engine(source.app)
        if source.db or os.environ.get("RUNLANE_DATABASE_URL"):
            store = open_store(store_url(source.db))
        else:
            store = unwrapped(app.store)
    except (ValueError, ConfigurationError) as exc:
        raise click.BadParameter(str(exc), param_hint="--db") from exc
    engine = Engine(
        store=existing_store(store),
        clock=app.clock,
        namespace=app.namespace,
        scope_reads=app.scope_reads,
        drive=False,
        consumers="never",
        announce=False,
        codec=app.codec,
    )
    # Share the registry itself so every registered version stays known (requeue needs it).
    engine.registry = app.registry
    return engine


def with_engine(source: Source, use: Callable[[Engine], Awaitable[T]]) -> T:
    engine = admin_engine(source)

    async def main() -> T:
        async with engine:
            return await use(engine)

    return run_async(main())


def with_audit(
    source: Source,
    action: str,
    use: Callable[[Engine], Awaitable[T]],
    *,
    run_id: str | None = None,
    detail: str | None = None,
    names: Callable[[T], tuple[str | None, str | None]] | None = None,
) -> T:
    """``with_engine`` for an operator action: it is appended to the audit log, done or
    refused, in the OS user's name. ``names``: the run id and detail the action's result
    gives (a start's new run, a fork's id), when the command line does not know them."""
    engine = admin_engine(source)

    async def main() -> T:
        async with engine:
            entry = functools.partial(record, engine, actor=os_user(), source="cli", action=action)
            try:
                result = await use(engine)
            except Exception as exc:
                await entry(outcome=outcome_of(exc), run_id=run_id, detail=detail)
                raise
            found = names(result) if names is not None else (None, None)
            await entry(outcome=OK, run_id=run_id or found[0], detail=detail or found[1])
            return result

    return run_async(main())


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro``, turning runlane errors into a clean one-line CLI failure."""
    try:
        return asyncio.run(coro)
    except RunlaneError as exc:
        # One line: a driver's message may span several (libpq's hints do).
        raise click.ClickException(" ".join(str(exc).split())) from exc


# ---------------------------------------------------------------- the group


class Commands(click.Group):
    """The command group; a backend whose extra is missing is a one-line failure, no traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MissingExtraError as exc:
            raise click.ClickException(str(exc)) from exc


EXIT_CODES = """Exit codes: 0 done; 1 failed (an unknown run, a refused start, an unreachable
store); 2 usage (a bad option or argument, no database named)."""


@click.group(cls=Commands, epilog=EXIT_CODES)
@click.version_option(package_name="runlane")
def main() -> None:
    """runlane: durable workflows with exact per-key flow control."""


@main.command()
@click.option("--fresh", is_flag=True, help="Wipe the demo folder and start over.")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the demo keeps its SQLite file (default $TMPDIR/runlane-demo).",
)
@click.option("--speed", type=float, default=1.0, hidden=True, help="Time compression factor.")
@click.option(
    "--db", default=None, hidden=True, help="Store URL instead of the demo's SQLite file."
)
def demo(fresh: bool, directory: Path | None, speed: float, db: str | None) -> None:
    """The embedded showcase: orders, singleton lanes and quotas, on SQLite; kill it and rerun."""
    from .demo import run_demo

    if speed <= 0:
        raise click.BadParameter("must be positive", param_hint="--speed")
    sys.exit(run_demo(directory=directory, fresh=fresh, speed=speed, db=db))


@main.command()
@click.argument("app", required=False)
@click.option("--db", default=None, help="Serve this store without an APP. " + DB_HELP)
@click.option("--namespace", default=None, help=NAMESPACE_HELP)
@click.option("--scope-reads", is_flag=True, help=SCOPE_HELP)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, show_default=True, type=int)
def serve(
    app: str | None, db: str | None, namespace: str | None, scope_reads: bool, host: str, port: int
) -> None:
    """Serve the HTTP API and the dashboard for the engine APP (module:attribute), or for the
    store --db names (no APP: runs can be read, cancelled and signalled, not started or
    retried, and nothing executes in this process).

    The server serves the engine's namespace: an APP engine with scope_reads=True (or --db
    with --namespace NS --scope-reads) shows and acts on that namespace's runs only.

    With RUNLANE_API_TOKENS="name:scope:token,..." (scope read: GET only; operate: every
    action) or RUNLANE_API_TOKEN (one operate token) set, every request but GET /healthz (and
    the dashboard's pages, which hold no data) needs Authorization: Bearer <token>. Serving on
    an address other than the loopback needs a token. Every action is audited (GET /audit).
    """
    with needs_extra("http", "runlane serve"):
        import uvicorn

        from .http.app import create_app
        from .http.auth import api_token, exposure_problem

    problem = exposure_problem(host, api_token())
    if problem is not None:
        raise click.UsageError(problem)
    source = Source(db, app, namespace, scope_reads)
    served = create_app(served_engine(source))
    settle_heap()
    uvicorn.run(served, host=host, port=port)


def settle_heap() -> None:
    """Leave what start-up made out of the garbage collector's full passes (``gc.freeze``): the
    modules, classes and functions of the app live as long as the process, yet a full pass
    walked every one of them, a pause of 20-40 ms every few reads of the lanes page. Frozen, a
    full pass walks what was made since (about 1 ms). ``runlane serve`` and ``runlane worker``
    do it once, when the app is loaded; an application that embeds the engine may do the same
    when its own start-up is done."""
    gc.collect()
    gc.freeze()


def served_engine(source: Source) -> Engine:
    """The engine ``runlane serve`` serves: the app's, or a producer on the store --db names."""
    source.check()
    if source.app is not None:
        return load_engine(source.app)
    if source.db is None and not os.environ.get("RUNLANE_DATABASE_URL"):
        raise click.UsageError("serve needs an APP (module:attribute) or --db URL")
    return admin_engine(source)


@main.command()
@click.argument("app")
def worker(app: str) -> None:
    """Run APP (module:attribute): a Worker, an Engine, or a list of them, until SIGTERM/SIGINT.

    Engines execute runs (and consume their transport's run queue), even one built as a
    producer (drive=False, consumers="never"): its loop and consumers are turned on here.
    Workers execute the remote steps of their group. On SIGTERM or Ctrl-C both drain: nothing
    in flight is lost. Logs go to stderr from INFO up: a run that fails is one WARNING line.
    """
    items = load_runnables(app)
    settle_heap()
    if not logging.getLogger().handlers:  # the application may have set up its own
        logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    run_async(_work(items))


async def _work(items: list[Engine | Worker]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    engines = [i for i in items if isinstance(i, Engine)]
    workers = [i for i in items if isinstance(i, Worker)]
    for engine in engines:
        # A worker executes runs: an engine the application built as a producer (drive=False,
        # consumers="never", as a web process builds it) drives its loop and consumes here.
        engine.drive = True
        await engine.__aenter__()
        await engine.start_consumers()
    running = [asyncio.create_task(w.run()) for w in workers]
    names = ", ".join([f"engine {e.id}" for e in engines] + [f"worker {w.name}" for w in workers])
    click.echo(f"runlane worker: running {names}; SIGTERM or Ctrl-C drains and stops", err=True)
    await stop.wait()
    click.echo("draining in-flight work...", err=True)
    await asyncio.gather(*(w.stop() for w in workers))
    await asyncio.gather(*running, return_exceptions=True)
    for engine in engines:
        await engine.__aexit__(None, None, None)
    click.echo("stopped", err=True)


# ---------------------------------------------------------------- runs


@main.group()
def runs() -> None:
    """Inspect and administer runs."""


def _sourced(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--db, --app, --namespace and --scope-reads, handed to ``fn`` as one ``source``."""

    @functools.wraps(fn)
    def command(
        db: str | None, app: str | None, namespace: str | None, scope_reads: bool, **kwargs: Any
    ) -> Any:
        return fn(source=Source(db, app, namespace, scope_reads), **kwargs)

    wrapped: Callable[..., Any] = click.option("--scope-reads", is_flag=True, help=SCOPE_HELP)(
        command
    )
    wrapped = click.option("--namespace", default=None, help=NAMESPACE_HELP)(wrapped)
    wrapped = click.option("--app", default=None, help=APP_HELP)(wrapped)
    return click.option("--db", default=None, help=DB_HELP)(wrapped)


def _common(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--json", "as_json", is_flag=True, help="Print JSON, for scripts.")(fn)
    return _sourced(fn)


def json_argument(text: str | None, name: str) -> Any:
    """A command's JSON argument (None when not given); bad JSON is a usage error."""
    try:
        return json.loads(text) if text is not None else None
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint=name) from exc


ATTR_HELP = (
    "An attribute, NAME=VALUE; repeat for several (every one must match). VALUE is a JSON"
    ' number, true or false when it reads as one, the text of a JSON string ("42"), else the'
    " text as it is."
)


def attribute_options(pairs: tuple[str, ...], option: str) -> dict[str, AttributeValue]:
    """``--attr NAME=VALUE`` options as attributes (``attributes.parse_filters``); a pair
    without ``=`` or a bad one is a usage error."""
    split = [pair.partition("=") for pair in pairs]
    for pair, (_, equals, _) in zip(pairs, split, strict=True):
        if not equals:
            raise click.BadParameter(f"{pair!r} is not NAME=VALUE", param_hint=option)
    try:
        return parse_filters((name, value) for name, _, value in split)
    except SerializationError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from exc


def say(as_json: bool, body: dict[str, Any], text: str) -> None:
    """A command's result: ``body`` as JSON with --json, else ``text``."""
    click.echo(json.dumps(body, indent=2) if as_json else text)


@runs.command("list")
@_common
@click.option("--workflow", default=None)
@click.option("--status", type=click.Choice([s.value for s in RunStatus]), default=None)
@click.option("--tag", default=None)
@click.option("--attr", "attributes", multiple=True, metavar="NAME=VALUE", help=ATTR_HELP)
@click.option("--limit", default=50, show_default=True, type=int)
@click.option("--offset", default=0, type=int)
@click.option("--follow", is_flag=True, help="Keep watching: print runs as they change.")
@click.option("--interval", default=1.0, show_default=True, type=float, help="--follow's poll.")
@click.option("--polls", default=None, type=int, hidden=True, help="Stop --follow after N polls.")
def runs_list(
    source: Source,
    workflow: str | None,
    status: str | None,
    tag: str | None,
    attributes: tuple[str, ...],
    limit: int,
    offset: int,
    as_json: bool,
    follow: bool,
    interval: float,
    polls: int | None,
) -> None:
    """List runs, newest first; with --follow, then every change (Ctrl-C stops)."""
    wanted = attribute_options(attributes, "--attr")
    if follow:
        query = RunQuery(
            workflow, RunStatus(status) if status else None, tag, attributes=wanted or None
        )
        with_engine(source, lambda e: follow_runs(e, query, limit, interval, polls, as_json))
        return
    found = with_engine(
        source,
        lambda e: e.list_runs(
            workflow=workflow,
            status=status,
            tag=tag,
            limit=limit,
            offset=offset,
            attributes=wanted,
        ),
    )
    if as_json:
        click.echo(json.dumps([run_to_dict(r) for r in found], indent=2))
        return
    Console().print(runs_table(found))


@runs.command("show")
@_common
@click.argument("run_id")
def runs_show(source: Source, run_id: str, as_json: bool) -> None:
    """Show one run and its step records."""

    async def read(engine: Engine) -> tuple[Run | None, list[StepRecord]]:
        return await engine.read(lambda store: _run_and_steps(store, run_id))

    run, steps = with_engine(source, read)
    if run is None:
        raise click.ClickException(f"no run with id {run_id!r}")
    if as_json:
        body = {**run_to_dict(run), "steps": [step_to_dict(s) for s in steps]}
        click.echo(json.dumps(body, indent=2))
        return
    console = Console()
    console.print(run_details(run))
    console.print(steps_table(steps))
    for line in attempt_lines(steps):
        console.print(line, markup=False, highlight=False)
    for heading, text in tracebacks(run, steps):
        console.print(f"[bold]{escape(heading)}[/]")
        console.print(text.rstrip("\n"), markup=False, highlight=False, soft_wrap=True)


async def _run_and_steps(store: Reads, run_id: str) -> tuple[Run | None, list[StepRecord]]:
    """A run and its records as the command line shows them: a payload this side cannot
    decode as ``"encrypted"``."""
    run = await store.get_run(run_id)
    steps = await store.list_steps(run_id) if run is not None else []
    return (
        None if run is None else shown_run(run),
        [shown_record(record) for record in steps],
    )


@runs.command("start")
@_common
@click.argument("workflow")
@click.argument("input", required=False)
@click.option("--input", "input_option", default=None, help="The run's input, JSON.")
@click.option("--id", "--run-id", "run_id", default=None, help="The run's id (default: a new one).")
@click.option("--tag", "tags", multiple=True, help="A tag for the run; repeat for several.")
@click.option(
    "--attr",
    "attributes",
    multiple=True,
    metavar="NAME=VALUE",
    help="An attribute of the run (VALUE read as --attr of runs list); repeat for several.",
)
@click.option("--priority", default=0, show_default=True, type=int)
@click.option(
    "--execution-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds the run may take (default: the workflow's); then it is cancelled.",
)
def runs_start(
    source: Source,
    as_json: bool,
    workflow: str,
    input: str | None,
    input_option: str | None,
    run_id: str | None,
    tags: tuple[str, ...],
    attributes: tuple[str, ...],
    priority: int,
    execution_timeout: float | None,
) -> None:
    """Start a run of WORKFLOW with an optional JSON input (--input, or INPUT); an --id that
    exists returns its run.

    Needs --app: the workflow's definition (its gates) must be known.
    """
    if input is not None and input_option is not None:
        raise click.UsageError("give the input once: INPUT or --input")
    value = json_argument(input if input_option is None else input_option, "INPUT")
    given = attribute_options(attributes, "--attr")
    if source.app is None:
        raise click.UsageError(
            "start needs --app module:attribute: the workflow's definition must be known"
        )

    async def start(engine: Engine) -> tuple[Run, bool]:
        # "fail" always: the refusal is how an existing run is told from a new one.
        try:
            run = await engine.start(
                workflow,
                value,
                run_id,
                priority=priority,
                tags=tags,
                if_exists="fail",
                execution_timeout=execution_timeout,
                attributes=given,
            )
        except RunExistsError as exists:
            existing = exists.run_id
            found = await engine.read(lambda store: store.get_run(existing))
            if found is None:  # pragma: no cover - a run is never deleted under a start
                raise
            return found, False
        return run, True

    run, created = with_audit(
        source, "start", start, run_id=run_id, names=lambda made: (made[0].id, None)
    )
    body = {**run_to_dict(run), "created": created}
    told = "started" if created else "already exists:"
    say(as_json, body, f"{told} {run.id} ({run.workflow}, {run.status})")


@runs.command("export")
@_sourced
@click.argument("run_id")
def runs_export(source: Source, run_id: str) -> None:
    """Print RUN_ID's history as JSON (the run, its step records, its signals not consumed
    yet): keep it beside your tests and replay it with runlane.testing.replay."""

    async def read(engine: Engine) -> dict[str, Any] | None:
        run = await engine.get_run(run_id)
        if run is None:
            return None
        steps = await engine.list_steps(run_id)
        signals = await engine.read(lambda store: store.list_signals(run_id))
        return history_doc(run, steps, signals)

    doc = with_engine(source, read)
    if doc is None:
        raise click.ClickException(f"no run with id {run_id!r}")
    click.echo(json.dumps(doc, indent=2))


@runs.command("cancel")
@_common
@click.argument("run_id")
def runs_cancel(source: Source, as_json: bool, run_id: str) -> None:
    """Cancel a run and its children (exit 1 when there is no such run)."""

    async def cancel(engine: Engine) -> bool:
        if await engine.read(lambda store: store.get_run(run_id)) is None:
            raise RunNotFoundError(run_id)
        return await engine.cancel(run_id)

    cancelled = with_audit(source, "cancel", cancel, run_id=run_id)
    text = f"nothing to cancel: {run_id} is already finished"
    say(
        as_json,
        {"run_id": run_id, "cancelled": cancelled},
        f"cancelled {run_id}" if cancelled else text,
    )


@runs.command("pause")
@_common
@click.argument("run_id")
def runs_pause(source: Source, as_json: bool, run_id: str) -> None:
    """Pause a run: the step in flight finishes, then it takes no further turn until resumed
    (exit 1 when there is no such run)."""
    paused = with_audit(source, "pause", lambda e: e.pause(run_id), run_id=run_id)
    text = f"paused {run_id}" if paused else f"nothing to pause: {run_id} is not active or paused"
    say(as_json, {"run_id": run_id, "paused": paused}, text)


@runs.command("resume")
@_common
@click.argument("run_id")
def runs_resume(source: Source, as_json: bool, run_id: str) -> None:
    """Resume a paused run (exit 1 when there is no such run)."""
    resumed = with_audit(source, "resume", lambda e: e.resume(run_id), run_id=run_id)
    text = f"resumed {run_id}" if resumed else f"nothing to resume: {run_id} is not paused"
    say(as_json, {"run_id": run_id, "resumed": resumed}, text)


@runs.command("fork")
@_common
@click.argument("run_id")
@click.option(
    "--from-seq",
    type=click.IntRange(min=1),
    default=None,
    help="Where the fork goes on (default: the first failed or unfinished operation).",
)
@click.option("--id", "fork_id", default=None, help="The fork's id (default: RUN_ID.fork.N).")
@click.option(
    "--input", "input_json", default=None, help="The fork's input, JSON (default: the original's)."
)
@click.option("--version", default=None, help="The workflow's version (default: the latest).")
def runs_fork(
    source: Source,
    as_json: bool,
    run_id: str,
    from_seq: int | None,
    fork_id: str | None,
    input_json: str | None,
    version: str | None,
) -> None:
    """Fork a run: a new run of its workflow that reuses its recorded results before
    --from-seq (never running them again) and goes on from there; the run is untouched.

    Needs --app: the workflow's definition (its gates, its code) must be known.
    """
    value = json_argument(input_json, "--input")
    if source.app is None:
        raise click.UsageError(
            "fork needs --app module:attribute: the workflow's definition must be known"
        )
    fork = with_audit(
        source,
        "fork",
        lambda e: e.fork(run_id, from_seq=from_seq, run_id=fork_id, input=value, version=version),
        run_id=run_id,
        names=lambda made: (None, made.id),
    )
    assert fork.forked_from is not None
    told = f"forked {run_id} at #{fork.forked_from[1]}: {fork.id} ({fork.status})"
    say(as_json, run_to_dict(fork), told)


@runs.command("retry")
@_common
@click.argument("run_id")
def runs_retry(source: Source, as_json: bool, run_id: str) -> None:
    """Requeue a failed, dead or cancelled run from its checkpoints.

    Needs --app: the run's workflow definition (its gates and timeout) must be known.
    """
    if source.app is None:
        raise click.UsageError(
            "retry needs --app module:attribute: the run's workflow definition must be known"
        )
    run = with_audit(source, "retry", lambda e: e.requeue(run_id), run_id=run_id)
    say(as_json, run_to_dict(run), f"requeued {run.id} ({run.status})")


@runs.command("signal")
@_common
@click.argument("run_id")
@click.argument("name")
@click.argument("payload", required=False)
def runs_signal(source: Source, as_json: bool, run_id: str, name: str, payload: str | None) -> None:
    """Send signal NAME to a run, with an optional JSON PAYLOAD."""
    value = json_argument(payload, "PAYLOAD")
    with_audit(
        source, "signal", lambda e: e.signal(run_id, name, value), run_id=run_id, detail=name
    )
    say(as_json, {"run_id": run_id, "signal": name}, f"signalled {run_id}: {name}")


@runs.command("update")
@_common
@click.argument("run_id")
@click.argument("name")
@click.argument("payload", required=False)
@click.option(
    "--timeout",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds to wait for the reply.",
)
def runs_update(
    source: Source,
    as_json: bool,
    run_id: str,
    name: str,
    payload: str | None,
    timeout: float,
) -> None:
    """Send update NAME to a run, with an optional JSON PAYLOAD, and print the workflow's reply
    (as JSON). Exit 1 when the workflow rejects it, the run ends without answering, or no
    answer comes within --timeout (the update stays delivered). An engine running the
    workflow answers it; this command only sends it and waits."""
    value = json_argument(payload, "PAYLOAD")

    async def update(engine: Engine) -> Any:
        try:
            return await engine.update(run_id, name, value, timeout=timeout)
        except TimeoutError as exc:
            raise click.ClickException(str(exc)) from exc

    reply = with_audit(source, "update", update, run_id=run_id, detail=name)
    say(as_json, {"run_id": run_id, "update": name, "reply": reply}, json.dumps(reply))


# ---------------------------------------------------------------- schedules


DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> timedelta:
    """``90``, ``90s``, ``15m``, ``12h``, ``7d`` or ``2w`` as a timedelta."""
    value, unit = (text[:-1], text[-1]) if text[-1:].isalpha() else (text, "s")
    try:
        seconds = float(value) * DURATION_UNITS[unit.lower()]
    except (KeyError, ValueError):
        raise click.BadParameter(
            f"{text!r} is no duration: a number of seconds, or with s, m, h, d or w",
            param_hint="--older-than",
        ) from None
    if seconds < 0:
        raise click.BadParameter("a duration is never negative", param_hint="--older-than")
    return timedelta(seconds=seconds)


@runs.command("prune")
@_common
@click.option(
    "--older-than",
    "older_than",
    required=True,
    help="Delete settled runs last updated longer ago than this: 90s, 15m, 12h, 7d, 2w.",
)
@click.option("--batch", default=1000, show_default=True, type=click.IntRange(min=1))
def runs_prune(source: Source, as_json: bool, older_than: str, batch: int) -> None:
    """Delete settled runs (completed, failed, cancelled, dead) with their steps and signals,
    and published events (the event log) older than the same age.

    A parent whose children are still active is kept; so is the newest event. Deletes in
    batches, so engines serving the same database go on meanwhile.
    """
    period = parse_duration(older_than)

    async def prune(engine: Engine) -> tuple[int, int]:
        runs = await engine.prune(period, batch=batch, events=False)
        return runs, await engine.prune_events(period, batch=batch)

    deleted, events = with_audit(source, "prune", prune, detail=f"older than {older_than}")
    say(
        as_json,
        {
            "deleted": deleted,
            "events_deleted": events,
            "older_than_seconds": period.total_seconds(),
        },
        f"deleted {deleted} settled run{'s' if deleted != 1 else ''} and {events}"
        f" event{'s' if events != 1 else ''} older than {older_than}",
    )


@main.group()
def schedules() -> None:
    """Inspect, pause, resume and trigger schedules."""


@schedules.command("list")
@_common
def schedules_list(source: Source, as_json: bool) -> None:
    """List the schedules: next fire, last fire, last error."""
    found = with_engine(source, lambda e: e.schedules.list())
    if as_json:
        click.echo(json.dumps([schedule_to_dict(s) for s in found], indent=2))
        return
    Console().print(schedules_table(found))


@schedules.command("pause")
@_common
@click.argument("schedule_id")
def schedules_pause(source: Source, as_json: bool, schedule_id: str) -> None:
    """Stop firing SCHEDULE_ID; windows that pass while paused never fire."""
    state = with_audit(
        source, "schedule.pause", lambda e: e.schedules.pause(schedule_id), detail=schedule_id
    )
    say(as_json, schedule_to_dict(state), f"paused {schedule_id}")


@schedules.command("resume")
@_common
@click.argument("schedule_id")
def schedules_resume(source: Source, as_json: bool, schedule_id: str) -> None:
    """Fire SCHEDULE_ID again, from its first window after now."""
    state = with_audit(
        source, "schedule.resume", lambda e: e.schedules.resume(schedule_id), detail=schedule_id
    )
    say(as_json, schedule_to_dict(state), f"resumed {schedule_id}: next {state.next_fire_at}")


@schedules.command("trigger")
@_common
@click.argument("schedule_id")
def schedules_trigger(source: Source, as_json: bool, schedule_id: str) -> None:
    """Start one run of SCHEDULE_ID now. Needs --app (the workflow's gates must be known)."""
    if source.app is None:
        raise click.UsageError("trigger needs --app module:attribute: the workflow must be known")
    run = with_audit(
        source,
        "schedule.trigger",
        lambda e: e.schedules.trigger(schedule_id),
        detail=schedule_id,
        names=lambda made: (made.id, None),
    )
    say(as_json, run_to_dict(run), f"started {run.id}")


async def follow_runs(
    engine: Engine, query: RunQuery, limit: int, interval: float, polls: int | None, as_json: bool
) -> None:
    """Print the newest runs, then each run that appears or changes, oldest change first."""
    seen: dict[str, datetime] = {}
    console = Console()
    for poll in itertools.count():
        found = await engine.read(lambda store: store.page_runs(query, limit))
        changed = [r for r in reversed(found) if seen.get(r.id) != r.updated_at]
        seen.update((r.id, r.updated_at) for r in found)
        if as_json:
            for run in changed:
                click.echo(json.dumps(run_to_dict(run)))
        elif changed:
            console.print(runs_table(changed))
        if polls is not None and poll + 1 >= polls:
            return
        await asyncio.sleep(interval)


# ---------------------------------------------------------------- the audit log


@main.command("audit")
@_common
@click.option("--limit", default=50, show_default=True, type=click.IntRange(min=1))
@click.option("--before", default=None, type=int, help="Entries older than this entry id.")
def audit_log(source: Source, as_json: bool, limit: int, before: int | None) -> None:
    """The audit log, newest first: each operator action taken through the HTTP API or this
    command line (when, who, which action on which run, how it went)."""
    found = with_engine(
        source, lambda e: e.read(lambda store: store.list_audit(limit, before=before))
    )
    if as_json:
        click.echo(json.dumps([audit_to_dict(e) for e in found], indent=2))
        return
    Console().print(audit_table(found))


# ---------------------------------------------------------------- lanes


@main.command("lanes")
@_common
@click.option(
    "--key",
    default=None,
    help="Only the lanes of this key (or step queue, or a limit's workflow when it has no key).",
)
def lanes_command(source: Source, as_json: bool, key: str | None) -> None:
    """Each singleton lane and quota key with active runs, and each step queue: holders,
    waiters in order, usage (a lane's first 3 holders and waiters, and how many more; with
    --key, every one). Each run-level rate limit or throttle with starts in its window:
    used of its limit, when a start fits again; each debounce: its run and when it fires
    (JSON: one list; step queues with kind "queue", limits "rate_limit" and "debounce")."""

    async def read(engine: Engine) -> AllLanes:
        now = engine.now()
        return await engine.read(lambda store: all_lanes(store, now, key))

    found = with_engine(source, read)
    if as_json:
        shown = lanes_to_dict(found)
        click.echo(json.dumps(shown["lanes"] + shown["queues"] + shown["limits"], indent=2))
        return
    console = Console()
    if found.lanes or not (found.queues or found.rates or found.debounces):
        console.print(lanes_table(found.lanes) if found.lanes else "no busy lanes")
    if found.queues:
        console.print(queues_table(found.queues))
    if found.rates or found.debounces:
        console.print(limits_table(found.rates, found.debounces))


# ---------------------------------------------------------------- replay


@main.command("replay")
@click.argument("app")
@click.option("--db", default=None, help=DB_HELP + " Default: the app's own store.")
@click.option("--workflow", default=None, help="Only the runs of this workflow.")
@click.option(
    "--status",
    type=click.Choice(["active", "all"]),
    default="active",
    show_default=True,
    help="The runs still in flight, or every stored run.",
)
@click.option("--limit", default=1000, show_default=True, type=click.IntRange(min=1))
@click.option("--json", "as_json", is_flag=True, help="Print JSON, for scripts.")
def replay_command(
    app: str, db: str | None, workflow: str | None, status: str, limit: int, as_json: bool
) -> None:
    """Replay the stored runs of APP's workflows against APP's code, writing nothing: exit 1
    naming every run the code cannot replay (its position, the recorded and the new
    operation). Run it before a deploy, against the new code and the live store."""
    statuses = [None] if status == "all" else sorted(ACTIVE_STATUSES)

    async def check(engine: Engine) -> ReplayReport:
        return await engine.read(
            lambda store: replay_stored(
                store, engine.registry, workflow=workflow, statuses=statuses, limit=limit
            )
        )

    report = with_engine(Source(db, app), check)
    if as_json:
        click.echo(json.dumps(replay_to_dict(report), indent=2))
    else:
        _print_replay(report)
    if report.diverged:
        sys.exit(1)


def _print_replay(report: ReplayReport) -> None:
    for run, error in report.diverged:
        click.echo(f"run {run.id} ({run.workflow}@{run.version}): {error}", err=True)
    for run, reason in report.skipped:
        click.echo(f"run {run.id} ({run.workflow}@{run.version}) not checked: {reason}")
    verdict = "cannot be replayed" if report.diverged else "replay with this code"
    bad = len(report.diverged)
    click.echo(f"{report.checked} runs checked: {bad or 'all'} {verdict}")


# ---------------------------------------------------------------- engines


@main.command("engines")
@_common
def engines_command(source: Source, as_json: bool) -> None:
    """The engines announced in the store: what each serves (workflow versions and worker
    groups), its last heartbeat, alive or gone; then the versions with active runs that no
    live engine serves (they wait for an engine that does)."""

    async def read(engine: Engine) -> tuple[list[EngineInfo], dict[tuple[str, str], int]]:
        engines = await engine.list_engines()
        active = await engine.read(lambda store: store.active_code_counts())
        return engines, unserved(active, engines)

    engines, waiting = with_engine(source, read)
    if as_json:
        body = {
            "engines": [engine_to_dict(e) for e in engines],
            "unserved": unserved_to_list(waiting),
        }
        click.echo(json.dumps(body, indent=2))
        return
    console = Console()
    console.print(engines_table(engines) if engines else "no engine has announced itself")
    if waiting:
        console.print(unserved_table(waiting))


# ---------------------------------------------------------------- db


@main.group()
def db() -> None:
    """Database administration."""


@db.command("upgrade")
@click.argument("url", required=False)
def db_upgrade(url: str | None) -> None:
    """Apply the schema migrations to URL (default $RUNLANE_DATABASE_URL); creates a SQLite file."""
    target = store_url(url, "pass the URL")
    if target.startswith(("postgresql:", "postgres:")):
        with needs_extra("postgres", "runlane db upgrade on PostgreSQL"):
            from .stores.postgres import upgrade

        version = run_async(upgrade(target))
        click.echo(f"postgresql schema up to date (version {version})")
        return
    if not target.startswith("sqlite:"):
        raise click.BadParameter("only sqlite:/// and postgresql:// URLs", param_hint="URL")

    async def touch() -> None:
        store = open_store(target)
        await store.open()
        await store.close()

    run_async(touch())
    click.echo("sqlite schema up to date")


if __name__ == "__main__":  # pragma: no cover
    main()
