"""The HTTP API and dashboard: ``create_app(engine)`` returns a Starlette application.

``create_app`` needs the http extra and imports Starlette on first use; the JSON shapes of runs
do not, so the command line prints them without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..extras import lazy_names
from .shapes import run_to_dict, step_to_dict

if TYPE_CHECKING:
    from .app import create_app

__getattr__ = lazy_names(__name__, {"create_app": (".app", "http")})

__all__ = ["create_app", "run_to_dict", "step_to_dict"]
