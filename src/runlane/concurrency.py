"""The one door into threads: sync callables run here, off the event loop."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import Callable
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
