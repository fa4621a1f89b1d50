"""The HTTP API and dashboard: ``create_app(engine)`` returns a Starlette application."""

from __future__ import annotations

from .app import create_app, run_to_dict, step_to_dict

__all__ = ["create_app", "run_to_dict", "step_to_dict"]
