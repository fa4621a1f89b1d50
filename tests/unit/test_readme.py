"""Every python block of the README and of docs/ runs as written, each in a fresh namespace.

A block is executed in a temporary folder (it may write ``runlane.db``), and every ``test_*``
coroutine function it defines is then awaited, so a test shown in the docs is a test that passes.
Blocks of another language (``sh``, ``json``, ``text``) are not python and are not run. A block
that only includes files (``--8<-- "examples/x.py"``) shows a file of ``docs/examples/``, which
``tests/integration/test_doc_examples.py`` runs. A python block that is deliberately not runnable
is preceded by ``<!-- not run: why -->``, and the test skips it saying why.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(
    r"(?:<!-- not run: (?P<why>.*?) -->\n)?^```python\n(?P<code>.*?)^```", re.S | re.M
)
INCLUDE = re.compile(r'^--8<-- "(?P<path>[^"]+)"$')


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    code: str
    not_run: str | None

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def includes(self) -> list[str] | None:
        """The files the block includes, when including is all it does."""
        lines = [line for line in self.code.splitlines() if line.strip()]
        found = [INCLUDE.match(line) for line in lines]
        return [m["path"] for m in found if m] if lines and all(found) else None


def blocks() -> list[Block]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for m in BLOCK.finditer(text):
            line = text.count("\n", 0, m.start("code"))
            found.append(Block(page, line, m["code"], m["why"]))
    return found


BLOCKS = blocks()


def test_the_pages_have_python_blocks() -> None:
    assert len([b for b in BLOCKS if b.page.name == "README.md"]) >= 10
    assert len([b for b in BLOCKS if b.includes]) >= 5


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_a_python_block_runs_as_written(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if block.not_run is not None:
        pytest.skip(f"marked not run: {block.not_run}")
    if block.includes is not None:
        for path in block.includes:
            assert (ROOT / "docs" / path).is_file(), f"{block.name} includes a missing {path}"
            assert path.startswith("examples/"), f"{block.name}: {path} is not run by the tests"
        return
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"block_{block.line}"}
    exec(compile(block.code, block.name, "exec"), namespace)
    for name, value in list(namespace.items()):
        if name.startswith("test_") and inspect.iscoroutinefunction(value):
            asyncio.run(value())
