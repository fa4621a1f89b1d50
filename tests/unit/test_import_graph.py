"""The package's modules import each other without a cycle: each layer of docs/design.md calls
into the layers after it, and what it needs back comes through a protocol its host implements.

Only imports that run when a module is loaded count: those under ``if TYPE_CHECKING:`` (types
for annotations) and those inside functions (deferred until called) are left out."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import runlane

PACKAGE = Path(runlane.__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _load_time_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and not _is_type_checking(node):
            yield from _load_time_imports(node.body)
            yield from _load_time_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _load_time_imports(block)
            for handler in node.handlers:
                yield from _load_time_imports(handler.body)


def _package_of(module: str) -> str:
    return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        package = _package_of(module).split(".")
        package = package[: len(package) - node.level + 1]
        base = ".".join([*package, base] if base else package)
    submodules = [f"{base}.{alias.name}" for alias in node.names]
    yield from submodules  # ``from . import ops``: the submodule itself
    if not all(s in MODULES for s in submodules):
        yield base


def imports_of(module: str) -> set[str]:
    tree = ast.parse(MODULES[module].read_text())
    found = (t for node in _load_time_imports(tree.body) for t in _targets(module, node))
    # A module's own packages are being loaded already when it is (Python imports parents first).
    parents = {module.rsplit(".", n)[0] for n in range(1, module.count(".") + 1)}
    return {t for t in found if t in MODULES and t != module and t not in parents}


def _cycle_from(start: str, graph: dict[str, set[str]]) -> list[str] | None:
    path, on_path, seen = [start], {start}, set()

    def visit(module: str) -> list[str] | None:
        for target in sorted(graph[module]):
            if target in on_path:
                return [*path[path.index(target) :], target]
            if target in seen:
                continue
            seen.add(target)
            path.append(target)
            on_path.add(target)
            found = visit(target)
            if found:
                return found
            on_path.discard(path.pop())
        return None

    return visit(start)


def test_the_package_has_no_import_cycle_at_load_time() -> None:
    graph = {module: imports_of(module) for module in MODULES}
    cycles = [c for m in sorted(graph) if (c := _cycle_from(m, graph))]
    assert not cycles, "import cycle: " + " -> ".join(cycles[0])


def test_a_turn_reaches_remote_steps_through_its_host_not_an_import() -> None:
    assert not {m for m in imports_of("runlane.turn") if m.startswith("runlane.remote")}
    assert not {m for m in imports_of("runlane.context") if m.startswith("runlane.remote")}


def test_the_graph_sees_relative_imports() -> None:
    assert "runlane.remote.dispatch" in imports_of("runlane.remote.steps")
    assert "runlane.stores.sqlite.ops" in imports_of("runlane.stores.sqlite.store")
