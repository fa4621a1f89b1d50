"""The one door into threads: sync callables run here, off the event loop, and so does a
coroutine that may block its loop (a remote workflow body replayed on a worker)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


async def run_in_thread(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run a blocking callable in the loop's default executor, keeping context variables."""
    loop = asyncio.get_running_loop()
    ctx = contextvars.copy_context()
    call = functools.partial(ctx.run, fn, *args, **kwargs)
    return await loop.run_in_executor(None, call)


async def call_step_body(fn: Callable[..., Any], input: Any) -> Any:
    """Call a step body with its input (if it takes one): async on the loop, sync in a thread."""
    args = (input,) if _takes_input(fn) else ()
    if inspect.iscoroutinefunction(fn):
        return await fn(*args)
    return await run_in_thread(fn, *args)


@functools.lru_cache(maxsize=4096)
def _takes_input(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params
    )


async def run_on_own_loop(main: Callable[[], Coroutine[Any, Any, T]], threads: Executor) -> T:
    """Run ``main()`` to its end on an event loop of its own, in a thread of ``threads``.

    A coroutine that blocks between its awaits (sync-heavy code) then stalls only its own loop:
    the caller's loop goes on serving everything else. Cancelling the caller cancels ``main``
    on its loop and waits for it to unwind (code that is blocking cannot be interrupted)."""
    handle = _LoopHandle()
    ctx = contextvars.copy_context()
    loop = asyncio.get_running_loop()
    done = loop.run_in_executor(threads, ctx.run, _run_to_end, main, handle)
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        handle.cancel()
        with contextlib.suppress(BaseException):
            await done
        raise


async def run_on_loop(call: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop) -> T:
    """Await ``call`` on ``loop`` (another thread's), or here when ``loop`` is this one: code
    bound to that loop (its clients, its timers) keeps running where it was made."""
    if loop is asyncio.get_running_loop():
        return await call
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(call, loop))


class _LoopHandle:
    """The task a thread's own loop runs, so that another thread can cancel it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._task: asyncio.Task[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cancelled = False

    async def track(self, main: Coroutine[Any, Any, T]) -> T:
        with self._lock:
            self._task, self._loop = asyncio.current_task(), asyncio.get_running_loop()
            if self._cancelled:
                main.close()
                raise asyncio.CancelledError()
        return await main

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            if self._task is None or self._loop is None:
                return
            # The loop may have finished and closed meanwhile: nothing left to cancel then.
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._task.cancel)


def _run_to_end(main: Callable[[], Coroutine[Any, Any, T]], handle: _LoopHandle) -> T:
    with asyncio.Runner() as runner:
        return runner.run(handle.track(main()))
