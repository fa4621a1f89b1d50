"""Who may use the API: a bearer token (``RUNLANE_API_TOKEN``), and where it may be served.

With a token set, every request needs ``Authorization: Bearer <token>`` except ``GET /healthz``
and the dashboard's pages and static files: those hold no data (the pages fetch it from the API
with the token the browser keeps for the session). The comparison takes the same time whatever
the guess.
"""

from __future__ import annotations

import hmac
import ipaddress
import os

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import HTTPError, error_response

TOKEN_ENV = "RUNLANE_API_TOKEN"
PUBLIC_PREFIXES = ("/static/", "/ui/")
PUBLIC_PATHS = ("/", "/healthz")


def api_token(token: str | None = None) -> str | None:
    """The token given, else ``RUNLANE_API_TOKEN``; None (no auth) when neither is set."""
    return token or os.environ.get(TOKEN_ENV) or None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def exposure_problem(host: str, token: str | None) -> str | None:
    """Why serving on ``host`` must be refused, or None: beyond this machine, only with a token."""
    if token or is_loopback(host):
        return None
    return (
        f"refusing to serve the API on {host} without a token: anyone who reaches it could "
        f"start and cancel runs. Set {TOKEN_ENV}, or serve on 127.0.0.1 (the default)."
    )


def wants_html(request: Request) -> bool:
    """A browser asking for a page (its Accept names text/html before any JSON)."""
    accept = request.headers.get("accept", "")
    html = accept.find("text/html")
    return html >= 0 and (accept.find("json") < 0 or html < accept.find("json"))


class TokenAuth:
    """ASGI middleware: a request without the bearer token is answered 401."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._public(Request(scope)) or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        refusal = HTTPError(401, "unauthorized", "this API needs Authorization: Bearer <token>")
        await error_response(refusal)(scope, receive, send)

    def _allowed(self, scope: Scope) -> bool:
        given = dict(scope["headers"]).get(b"authorization", b"")
        return hmac.compare_digest(given, self.expected)

    @staticmethod
    def _public(request: Request) -> bool:
        path = request.url.path
        if request.method not in ("GET", "HEAD"):
            return False
        if path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES):
            return True
        # A run's address opened in a browser is its page, which holds no data itself.
        return path.startswith("/runs/") and path.count("/") == 2 and wants_html(request)


__all__ = ["TOKEN_ENV", "TokenAuth", "api_token", "exposure_problem", "is_loopback", "wants_html"]
