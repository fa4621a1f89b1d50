"""Connection URLs: what runlane shows of one (never its password), and which PostgreSQL server
a store or the db transport reaches through one.

A URL may carry a password (``postgresql://user:secret@host/db``, ``redis://:secret@host``, or a
``password=`` option); a repr, a log line or an error message shows it as ``***``.

A PostgreSQL URL may list several hosts (``postgresql://app@db1:5432,db2:5432/app``): libpq tries
them in turn. A store and the db transport write, so of those they need the primary:
``writable_conninfo`` makes each connection skip a standby (``target_session_attrs``), and after
a failover the reconnects land on the promoted one.
"""

from __future__ import annotations

import re

from .errors import ConfigurationError

_USERINFO_PASSWORD = re.compile(r"(//[^/?#@:]*:)[^/?#@]*@")
_OPTION_PASSWORD = re.compile(r"((?:^|[?&\s])password\s*=\s*)[^&\s]*", re.IGNORECASE)

SQLITE_URLS = (
    "sqlite:///relative/path.db is relative to the current folder, "
    "sqlite:////absolute/path.db absolute (as in SQLAlchemy)"
)

WRITABLE = ("read-write", "primary")
"""The ``target_session_attrs`` that reach only a server that takes writes."""


def redact(url: str) -> str:
    """``url`` with any password in it replaced by ``***``."""
    return _OPTION_PASSWORD.sub(r"\1***", _USERINFO_PASSWORD.sub(r"\1***@", url))


def writable_conninfo(url: str) -> str:
    """The libpq connection string a store or the db transport opens for ``url`` (a URL or a
    connection string): with several hosts, ``target_session_attrs=read-write`` unless the URL
    names ``read-write`` or ``primary`` itself, so each connection reaches the primary.

    Raises ``ConfigurationError`` for what would never connect or never write: a URL libpq
    cannot read, hosts and ports that do not pair up (one port for all, or one each), or a
    ``target_session_attrs`` that lets a connection land on a standby (``any`` is libpq's
    default, and refused only with several hosts).
    """
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        params = conninfo_to_dict(url)
    except ProgrammingError as exc:
        reason = str(exc).strip()
        raise ConfigurationError(f"not a PostgreSQL URL: {redact(url)!r}: {reason}") from None
    hosts = max(len(_listed(params.get("host"))), len(_listed(params.get("hostaddr"))))
    ports = _listed(params.get("port"))
    if len(ports) not in (1, hosts) or not all(port.isdigit() or not port for port in ports):
        raise ConfigurationError(
            f"{redact(url)!r}: {hosts} host(s) and the ports {','.join(ports)}; give one port "
            "number for all hosts or one for each"
        )
    attrs = params.get("target_session_attrs")
    if attrs is None and hosts > 1:
        params["target_session_attrs"] = "read-write"
    elif attrs is not None and attrs not in WRITABLE and (hosts > 1 or attrs != "any"):
        raise ConfigurationError(
            f"{redact(url)!r}: target_session_attrs={attrs} may reach a standby, and runlane "
            "writes; use read-write or primary (the default with several hosts)"
        )
    return str(make_conninfo("", **params))


def _listed(value: object) -> list[str]:
    """The entries of a comma-separated host or port option (none: libpq's default, one)."""
    return str(value).split(",") if value else [""]


__all__ = ["SQLITE_URLS", "WRITABLE", "redact", "writable_conninfo"]
