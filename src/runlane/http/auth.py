"""Who may use the API: bearer tokens, each with a name and a scope, and where it may be served.

``RUNLANE_API_TOKENS="name:scope:token,..."`` names each token and gives it a scope: ``read``
may only ``GET`` (and ``HEAD``); ``operate`` may also start, cancel, retry, signal, pause,
resume, fork and update runs, publish events and act on schedules (every other method). The
single ``RUNLANE_API_TOKEN`` of before still works: a token of scope ``operate`` named
``default``. With any token set, every request needs ``Authorization: Bearer <token>`` except
``GET /healthz`` and the dashboard's pages and static files: those hold no data (the pages fetch
it from the API with the token the browser keeps for the session). A token is found by
comparing it with every token configured, each comparison taking the same time whatever the
guess. Without any token, the API is open (it is then served on the loopback only) and its
caller is ``anonymous``, of scope ``operate``.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import ConfigurationError
from .errors import HTTPError, error_response

TOKEN_ENV = "RUNLANE_API_TOKEN"
TOKENS_ENV = "RUNLANE_API_TOKENS"
PUBLIC_PREFIXES = ("/static/", "/ui/")
PUBLIC_PATHS = ("/", "/healthz")
READ = "read"
OPERATE = "operate"
SCOPES = (READ, OPERATE)
READ_METHODS = ("GET", "HEAD")
DEFAULT_NAME = "default"


@dataclass(frozen=True)
class Principal:
    """Who a request comes from: a token's name and scope."""

    name: str
    scope: str

    @property
    def operates(self) -> bool:
        return self.scope == OPERATE


ANONYMOUS = Principal("anonymous", OPERATE)
"""The caller of an API served without any token (on the loopback only)."""


@dataclass(frozen=True)
class Tokens:
    """The tokens the API accepts, by their ``Authorization`` header."""

    by_header: Mapping[bytes, Principal]

    def find(self, header: bytes) -> Principal | None:
        """The principal whose token ``header`` carries, or None; every token is compared."""
        found = None
        for expected, principal in self.by_header.items():
            if hmac.compare_digest(header, expected):
                found = principal
        return found


def api_tokens(token: str | None = None, tokens: str | None = None) -> Tokens | None:
    """The tokens given, else those of ``RUNLANE_API_TOKENS`` and ``RUNLANE_API_TOKEN``; None
    (no auth) when none is set. A malformed list raises ``ConfigurationError``."""
    single = token or os.environ.get(TOKEN_ENV) or None
    listed = tokens if tokens is not None else os.environ.get(TOKENS_ENV, "")
    entries = parse_tokens(listed)
    if single is not None:
        entries.append((Principal(DEFAULT_NAME, OPERATE), single))
    _check_unique(entries)
    if not entries:
        return None
    return Tokens({f"Bearer {secret}".encode(): who for who, secret in entries})


def parse_tokens(text: str) -> list[tuple[Principal, str]]:
    """``name:scope:token,...`` as (principal, token) pairs (a token may hold ``:``)."""
    found = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, _, rest = item.partition(":")
        scope, _, secret = rest.partition(":")
        if not name or not secret or scope not in SCOPES:
            raise ConfigurationError(
                f"{TOKENS_ENV} entries are name:scope:token with scope read or operate;"
                f" {name or '?'!r} is not"
            )
        found.append((Principal(name, scope), secret))
    return found


def _check_unique(entries: Iterable[tuple[Principal, str]]) -> None:
    names: set[str] = set()
    secrets: set[str] = set()
    for who, secret in entries:
        if who.name in names:
            raise ConfigurationError(f"API token name {who.name!r} is given twice")
        if secret in secrets:
            raise ConfigurationError(f"API token {who.name!r} has another token's secret")
        names.add(who.name)
        secrets.add(secret)


def api_token(token: str | None = None) -> str | None:
    """A token, if any is configured (``RUNLANE_API_TOKEN`` or ``RUNLANE_API_TOKENS``): what
    ``exposure_problem`` asks."""
    return token or os.environ.get(TOKEN_ENV) or os.environ.get(TOKENS_ENV) or None


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
        f"start and cancel runs. Set {TOKENS_ENV} (or {TOKEN_ENV}), or serve on 127.0.0.1"
        " (the default)."
    )


def wants_html(request: Request) -> bool:
    """A browser asking for a page (its Accept names text/html before any JSON)."""
    accept = request.headers.get("accept", "")
    html = accept.find("text/html")
    return html >= 0 and (accept.find("json") < 0 or html < accept.find("json"))


def principal_of(request: Request) -> Principal:
    """Who sent ``request`` (``anonymous`` on an API served without tokens)."""
    found = request.scope.get("state", {}).get("principal")
    return found if isinstance(found, Principal) else ANONYMOUS


class TokenAuth:
    """ASGI middleware: a request without a known bearer token is answered 401; one with a
    token carries its principal (``principal_of``) to the handlers, which check its scope."""

    def __init__(self, app: ASGIApp, tokens: Tokens) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = dict(scope["headers"]).get(b"authorization", b"")
        principal = self.tokens.find(header)
        if principal is not None:
            scope.setdefault("state", {})["principal"] = principal
        if principal is not None or self._public(Request(scope)):
            await self.app(scope, receive, send)
            return
        refusal = HTTPError(401, "unauthorized", "this API needs Authorization: Bearer <token>")
        await error_response(refusal)(scope, receive, send)

    @staticmethod
    def _public(request: Request) -> bool:
        path = request.url.path
        if request.method not in READ_METHODS:
            return False
        if path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES):
            return True
        # A run's address opened in a browser is its page, which holds no data itself.
        return path.startswith("/runs/") and path.count("/") == 2 and wants_html(request)


def forbidden(principal: Principal, method: str, path: str) -> HTTPError:
    """The refusal of an action to a token that may only read."""
    return HTTPError(
        403,
        "forbidden",
        f"token {principal.name!r} may only read: {method} {path} needs a token of scope"
        f" {OPERATE!r}",
        token=principal.name,
        scope=principal.scope,
    )


__all__ = [
    "ANONYMOUS",
    "OPERATE",
    "READ",
    "TOKENS_ENV",
    "TOKEN_ENV",
    "Principal",
    "TokenAuth",
    "Tokens",
    "api_token",
    "api_tokens",
    "exposure_problem",
    "forbidden",
    "is_loopback",
    "parse_tokens",
    "principal_of",
    "wants_html",
]
