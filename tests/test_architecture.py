"""The package's shape, kept true: no import cycle, no file over 600 lines, no function
over 80 lines (issue #21), and one place per kind of knowledge (registries).

The limits are what a maintainer can hold in mind at once; a change that breaks one
splits the module or the function instead of raising the number.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "dpsql"
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The dpsql modules ``name`` imports when it is loaded (module-level statements,
    ``if TYPE_CHECKING:`` blocks included; imports inside functions run later)."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def add(target: str) -> None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)

    def visit(nodes) -> None:
        for node in nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    add(alias.name)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[:len(anchor) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    add(full if full in modules else base)
            elif isinstance(node, ast.If | ast.Try):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(ast.parse(path.read_text()).body)
    return {m for m in found if m.startswith("dpsql")}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def test_no_import_cycle():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    # a package's __init__ re-exporting its own submodules is not a cycle of design
    for name in graph:
        graph[name] = {m for m in graph[name] if not m.startswith(name + ".")}
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: p.name)
def test_file_and_function_sizes(path):
    lines = path.read_text().splitlines()
    assert len(lines) <= MAX_FILE_LINES, f"{path.name}: {len(lines)} lines"
    for node in ast.walk(ast.parse("\n".join(lines))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = node.end_lineno - node.lineno + 1
            assert length <= MAX_FUNCTION_LINES, f"{path.name}: {node.name} is {length} lines"


def test_registries_are_the_one_place():
    """An aggregate, a mechanism and an engine are each found through one registry."""
    from sqlglot import exp

    from dpsql import aggregates, mechanisms, validate
    from dpsql.backends import ENGINES

    assert {exp.Count, exp.Sum, exp.Avg, exp.Median} <= set(aggregates.FUNCTIONS)
    assert set(validate.AGGREGATES) == set(aggregates.FUNCTIONS)
    assert set(mechanisms.MECHANISMS) == {"laplace", "gaussian"}
    assert {e.module.rpartition(".")[2] for e in ENGINES} == {
        "duckdb", "postgres", "sqlite", "spark"}


def test_every_package_is_installed():
    """A subpackage missing from pyproject's list is left out of a non-editable install
    (``pip install .``, the README's demo): ``dpsql.aggregates`` and ``dpsql.ledger``
    once were, and the demo failed at import while every test (editable) passed."""
    import tomllib

    root = Path(__file__).resolve().parent.parent
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())
                 ["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(root).parts)
               for p in (root / "dpsql").rglob("__init__.py")}
    assert on_disk <= listed, sorted(on_disk - listed)


def test_no_class_subclasses_sqlglot():
    """sqlglot's compiled build (``sqlglot[c]``), which sqlglot loads whenever it is
    installed, refuses interpreted subclasses of its classes ("interpreted classes
    cannot inherit from compiled"): a dialect subclass once made every parameterised
    query fail for anyone who had it installed. dpsql uses sqlglot's classes as they are."""
    import importlib
    import inspect
    import pkgutil

    import dpsql

    found = []
    for info in pkgutil.walk_packages(dpsql.__path__, "dpsql."):
        if info.name.startswith("dpsql.server") and info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != info.name:
                continue
            found += [f"{info.name}.{name}({base.__module__}.{base.__qualname__})"
                      for klass in inspect.getmro(cls) for base in klass.__bases__
                      if base.__module__.split(".")[0] == "sqlglot"]
    assert found == []


#: Modules that build a type from text another way: sqlbuild is the one builder;
#: probe_types keeps its own (a dialect's names, user-defined types allowed); loaders
#: and postprocess read a backend's reported type names in DuckDB's grammar.
_OWN_TYPE_BUILDERS = {"sqlbuild.py", "probe_types.py", "loaders.py", "postprocess.py"}


def test_types_are_built_by_one_cached_builder():
    """``exp.DataType.build("DOUBLE")`` parses its text every time (about 10 µs and a
    new dialect); the rewrite and the dialects build types per query, so they take
    :func:`dpsql.sqlbuild.data_type`, parsed once per name."""
    found = [f"{p.relative_to(PACKAGE)}:{i}" for p in sorted(PACKAGE.rglob("*.py"))
             if p.name not in _OWN_TYPE_BUILDERS
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if "DataType.build(" in line]
    assert not found, found
