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
INCLUDE = re.compile(r'^--8<-- "(?P<path>[^":]+)(?::(?P<section>[\w-]+))?"$')


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
    def includes(self) -> list[tuple[str, str | None]] | None:
        """The files (and sections of them) the block includes, when including is all it does."""
        lines = [line for line in self.code.splitlines() if line.strip()]
        found = [INCLUDE.match(line) for line in lines]
        return [(m["path"], m["section"]) for m in found if m] if lines and all(found) else None


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
    assert len([b for b in BLOCKS if b.page.name == "README.md"]) >= 1
    assert len([b for b in BLOCKS if b.page.parent.name == "features"]) >= 20
    assert len([b for b in BLOCKS if b.includes]) >= 5


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_a_python_block_runs_as_written(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if block.not_run is not None:
        pytest.skip(f"marked not run: {block.not_run}")
    if block.includes is not None:
        for path, section in block.includes:
            assert (ROOT / "docs" / path).is_file(), f"{block.name} includes a missing {path}"
            assert path.startswith("examples/"), f"{block.name}: {path} is not run by the tests"
            text = (ROOT / "docs" / path).read_text()
            for edge in ("start", "end") if section else ():
                marker = f"# --8<-- [{edge}:{section}]"
                assert marker in text, f"{block.name}: {path} has no {marker}"
        return
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"block_{block.line}"}
    exec(compile(block.code, block.name, "exec"), namespace)
    for name, value in list(namespace.items()):
        if name.startswith("test_") and inspect.iscoroutinefunction(value):
            asyncio.run(value())


def page_texts() -> dict[str, str]:
    return {str(page.relative_to(ROOT)): page.read_text() for page in PAGES}


def test_no_page_installs_runlane_from_an_index_it_is_not_published_on() -> None:
    # `pip install runlane` (or 'runlane[http]') fails until the package is published: the
    # pages say how to install from a clone or from a wheel built with `make dist`.
    from_index = re.compile(r"pip\s+install\s+['\"]?runlane\b")
    assert {name: from_index.findall(text) for name, text in page_texts().items()} == {
        name: [] for name in page_texts()
    }
    installing = ROOT.joinpath("README.md").read_text().split("## Installing", 1)[1]
    assert "pip install ." in installing and "make dist" in installing
    assert "pip install ." in ROOT.joinpath("docs", "tutorial.md").read_text()


def test_the_readme_names_every_dependency_of_the_bare_install() -> None:
    import tomllib

    project = tomllib.loads(ROOT.joinpath("pyproject.toml").read_text())["project"]
    names = [re.split(r"[<>=;\[ ]", dep, maxsplit=1)[0] for dep in project["dependencies"]]
    installing = ROOT.joinpath("README.md").read_text().split("## Installing", 1)[1]
    bare = installing.split("The bare install depends on", 1)[1].split(".", 1)[0]
    assert [name for name in names if f"`{name}`" not in bare] == []


THIRD_PARTY = {"starlette": "http", "uvicorn": "http", "psycopg": "postgres", "redis": "redis"}


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_a_block_that_imports_an_extras_package_names_the_extra(block: Block) -> None:
    text = block.page.read_text()
    before = text[: text.index(block.code)].rsplit("```", 1)[0][-400:]
    for module, extra in THIRD_PARTY.items():
        if re.search(rf"^(from|import) {module}\b", block.code, re.M):
            assert f"runlane[{extra}]" in before + block.code, f"{block.name} imports {module}"


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_an_async_test_in_a_block_runs_in_pytest_asyncios_default_mode(block: Block) -> None:
    # pytest-asyncio's default (strict) mode runs only marked async tests; an unmarked one
    # would need asyncio_mode = "auto", which a reader's project may not have.
    for match in re.finditer(r"^async def (test_\w+)", block.code, re.M):
        head = block.code[: match.start()].rstrip().rsplit("\n", 1)[-1]
        marked = head == "@pytest.mark.asyncio" or "pytestmark = pytest.mark.asyncio" in block.code
        assert marked, f"{block.name}: {match[1]} is not marked for pytest-asyncio"
