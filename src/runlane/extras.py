"""Optional dependencies: which extra brings which package, and the imports that need one.

``import runlane`` and the embedded engine (memory and SQLite stores, the in-process transport,
the CLI, the test kit) import none of these packages. A backend that needs one imports it when it
is first used, inside ``needs_extra``, so a missing package names the extra that installs it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from .errors import MissingExtraError

# extra -> the top-level modules it installs
EXTRAS: dict[str, tuple[str, ...]] = {
    "postgres": ("psycopg", "psycopg_pool"),
    "redis": ("redis",),
    "http": ("starlette", "uvicorn", "prometheus_client"),
    "otel": ("opentelemetry",),
    "crypto": ("cryptography",),
}


@contextmanager
def needs_extra(extra: str, feature: str) -> Iterator[None]:
    """Imports inside the block that miss a package of ``extra`` raise ``MissingExtraError``.

    Only the extra's own packages count: any other missing module is a bug, not an extra to
    install, and its ``ModuleNotFoundError`` goes through unchanged.
    """
    try:
        yield
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing not in EXTRAS[extra]:
            raise
        raise MissingExtraError(feature, extra, missing) from exc


def lazy_names(package: str, names: dict[str, tuple[str, str | None]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports each of ``names`` from its submodule on first use.

    ``names`` maps a public name to (relative module, extra it needs or None), so
    ``from runlane.stores import PostgresStore`` works and only then imports psycopg.
    """

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, extra = names[name]
        with needs_extra(extra, name) if extra else nullcontext():
            return getattr(importlib.import_module(module, package), name)

    return __getattr__
