"""What runlane shows of a connection URL: never its password.

A URL may carry a password (``postgresql://user:secret@host/db``, ``redis://:secret@host``, or a
``password=`` option); a repr, a log line or an error message shows it as ``***``.
"""

from __future__ import annotations

import re

_USERINFO_PASSWORD = re.compile(r"(//[^/?#@:]*:)[^/?#@]*@")
_OPTION_PASSWORD = re.compile(r"((?:^|[?&\s])password\s*=\s*)[^&\s]*", re.IGNORECASE)

SQLITE_URLS = (
    "sqlite:///relative/path.db is relative to the current folder, "
    "sqlite:////absolute/path.db absolute (as in SQLAlchemy)"
)


def redact(url: str) -> str:
    """``url`` with any password in it replaced by ``***``."""
    return _OPTION_PASSWORD.sub(r"\1***", _USERINFO_PASSWORD.sub(r"\1***@", url))


__all__ = ["SQLITE_URLS", "redact"]
