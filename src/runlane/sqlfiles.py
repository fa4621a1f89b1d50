"""SQL kept in ``.sql`` files shipped inside the package: one loader for the stores and transports.

A file of named statements holds blocks headed ``-- name: <name>``. A block may paste in another
by writing ``{other_name}`` (fragments may hold fragments), so statements share fragments, not
copies. Text before the first block is a preamble for readers and is dropped.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

_BLOCK = re.compile(r"^-- name: (\w+)[ \t]*\n", re.MULTILINE)
_FRAGMENT = re.compile(r"\{(\w+)\}")


def read(package: str, *path: str) -> str:
    """The text of the resource ``path`` (folders, then a file name) inside ``package``."""
    return resources.files(package).joinpath(*path).read_text(encoding="utf-8")


@functools.cache
def named_statements(package: str, *path: str) -> dict[str, str]:
    """The statements of the file ``path`` inside ``package``, by their ``-- name:``, expanded.

    Read once per process. Each comes as :func:`statement` leaves it.
    """
    parts = _BLOCK.split(read(package, *path))  # [preamble, name1, body1, name2, body2, ...]
    blocks = {name: statement(body) for name, body in zip(parts[1::2], parts[2::2], strict=True)}

    def expand(body: str) -> str:
        return _FRAGMENT.sub(lambda m: expand(blocks[m[1]]) if m[1] in blocks else m[0], body)

    return {name: expand(body) for name, body in blocks.items()}


def statement(body: str) -> str:
    """One block as the driver gets it: no comment lines, no indentation, no trailing ``;``."""
    # Comments go: psycopg would read a placeholder mentioned in one as a parameter. So does
    # indentation: psycopg caches the parsing of a statement only up to 4,096 characters
    # (``MAX_CACHED_STATEMENT_LENGTH``) and parses a longer one again at every execution.
    # The spaces around commas and equals signs go too (outside quoted literals), which keeps
    # the longest statements under that limit.
    lines = [line.strip() for line in body.splitlines() if not line.lstrip().startswith("--")]
    parts = "\n".join(lines).strip().rstrip(";").split("'")
    for i in range(0, len(parts), 2):  # the even parts are outside quotes
        parts[i] = parts[i].replace(", ", ",").replace(" = ", "=")
    return "'".join(parts)


__all__ = ["named_statements", "read", "statement"]
