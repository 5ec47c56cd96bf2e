"""The package's shape, checked: no import cycles, the report as a pure consumer, lint clean.

Modules are grouped by job, not by a line cap (a module is split when it holds two jobs).

The import graph is read from the source: module-level imports, ``TYPE_CHECKING`` blocks and imports
inside functions included (a type-only or lazy import is still a dependency: a cycle hidden behind
either is still two modules that cannot be understood apart).
"""

from __future__ import annotations

import ast
import functools
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "onnx_precision")


@functools.cache
def _modules() -> dict[str, str]:
    """Dotted module name -> file path, for every module of the package."""
    out = {}
    for directory, _, files in os.walk(PACKAGE):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(directory, f)
                rel = os.path.relpath(path, ROOT)[:-3].split(os.sep)
                if rel[-1] == "__init__":
                    rel = rel[:-1]
                out[".".join(rel)] = path
    return out


@functools.cache
def _tree(path: str) -> ast.Module:
    """A module's syntax tree, parsed once for every test of this file (do not change it)."""
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read())


def _imports(name: str, path: str, modules: dict[str, str]) -> set[str]:
    """The package modules ``name`` imports (a package import counts as its ``__init__``)."""
    tree = _tree(path)
    is_package = path.endswith("__init__.py")
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.ImportFrom):
            base = name.split(".") if is_package else name.split(".")[:-1]
            if node.level:
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                found.add(candidate if candidate in modules else target)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {m for m in found if m in modules and m != name}


@functools.cache
def _graph() -> dict[str, frozenset[str]]:
    """Each module -> the package modules it imports, read once for every test of this file."""
    modules = _modules()
    return {name: frozenset(_imports(name, path, modules)) for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


@pytest.mark.slow  # 2.0 s in a full run on 2 busy cores
def test_the_import_graph_is_read_from_the_source():
    graph = _graph()
    assert "onnx_precision.oracle.sessions" in graph["onnx_precision.oracle.inspection"]
    assert "onnx_precision.context" in graph["onnx_precision.oracle.emulation_session"]
    assert "onnx_precision.typing_rules" in graph["onnx_precision.context"]


def test_no_module_passes_600_lines():
    """Issue 31's bound: past 600 lines a module has held two jobs each time (rewriter.py, rules/decoder.py,
    data.py, oracle/inspection.py were split by job into packages and modules)."""
    long = {}
    for name, path in _modules().items():
        with open(path, encoding="utf-8") as f:
            lines = sum(1 for _ in f)
        if lines > 600:
            long[name] = lines
    assert not long, long


def test_no_import_cycle_between_modules():
    # a package's __init__ re-exports its modules: an edge from a module to its own package's
    # __init__ (``from . import x``) is how siblings are reached, not a cycle of responsibilities
    graph = {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in _graph().items()}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_a_cycle_is_found_when_there_is_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_report_is_a_pure_consumer():
    """Only the commands (convert, on files or in memory, and the cli) import the report: no stage
    below them depends on it."""
    report = "onnx_precision.report"
    importers = {m for m, deps in _graph().items() if not m.startswith(report)
                 and any(d == report or d.startswith(report + ".") for d in deps)}
    assert importers <= {"onnx_precision.convert.run", "onnx_precision.convert.in_memory",
                         "onnx_precision.cli.convert"}


def test_the_report_reads_values_from_below_the_conversion():
    """What the report reads (the search's result, the verification, the outcome) is in
    :mod:`onnx_precision.outcome`, below both: no report module imports the conversion."""
    readers = {m: deps for m, deps in _graph().items()
               if m.startswith("onnx_precision.report") or m == "onnx_precision.outcome"}
    upward = {m: sorted(d for d in deps if d.startswith("onnx_precision.convert"))
              for m, deps in readers.items()}
    assert not any(upward.values()), upward


def _tool(name: str) -> str:
    path = shutil.which(name, path=os.path.dirname(sys.executable)) or shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]' installs it)")
    return path


def test_judging_is_one_package_below_the_stages():
    """Judging one output (tolerance, error statistics, comparison, acceptance, task checks, metrics)
    is the judge/ package, which reads nothing of the package but formatting and the error family:
    every stage can judge, and a new error statistic is a row of judge/statistics.py."""
    judge = "onnx_precision.judge"
    graph = _graph()
    reads = {d for m, deps in graph.items() if m.startswith(judge) for d in deps if not d.startswith(judge)}
    assert reads <= {"onnx_precision.format", "onnx_precision.errors"}
    # the old top-level modules are gone, but for the public Tolerance's former home (a re-export)
    assert not {f"onnx_precision.{m}" for m in ("compare", "metrics", "task_checks", "verdict")} & set(graph)
    assert graph["onnx_precision.tolerance"] == {"onnx_precision.judge.settings"}
    from onnx_precision.judge import Tolerance
    from onnx_precision.tolerance import Tolerance as PublicTolerance
    assert PublicTolerance is Tolerance


def test_ruff_is_clean():
    """The package's ruff configuration holds for everything in the repository that is Python."""
    result = subprocess.run([_tool("ruff"), "check", "onnx_precision", "tests", "scripts", "models"],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:]


def test_ci_runs_mypy_after_the_tests_and_fails_on_its_errors():
    """mypy over pyproject's ``files`` (the package, tests/, scripts/ and models/) is CI's own step
    after the README's test command, not a test: 18 s of CPU in a fresh checkout, a tenth of the
    suite's. CI stops at a failing command (``set -e``), and the README says how to run it."""
    lines = [line.strip() for line in open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8")]
    assert "set -euo pipefail" in lines
    tests = next(i for i, line in enumerate(lines) if line.endswith("python -m pytest -n 2 -q"))
    assert "mypy" in lines[tests + 1:]
    development = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read().split("## Development")[1]
    assert "\n- `mypy` (no arguments" in development


@pytest.mark.slow  # 0.5 s in a full run on 2 busy cores
def test_a_native_oracle_is_one_row():
    """The onnxruntime providers the native oracles run on are named in native_oracles.py alone: the
    registry of runtimes, the oracles by name and the commands a run suggests read its rows."""
    from onnx_precision.native_oracles import NATIVE_ORACLES
    from onnx_precision.target import NATIVE_PROVIDERS
    assert NATIVE_PROVIDERS == {o.name: o.provider for o in NATIVE_ORACLES}
    providers = {o.provider for o in NATIVE_ORACLES}
    naming = {module for module, path in _modules().items()
              if any(isinstance(n, ast.Constant) and n.value in providers for n in ast.walk(_tree(path)))}
    assert naming == {"onnx_precision.native_oracles"}


def test_a_16bit_type_is_one_row():
    """A new 16-bit type is a row of float_types (its limits, names, Cast opset) plus its kernel facts:
    plans' precisions are the rows', trtexec's releases are known for each, and no module but the
    table (and typing_rules.types, which names every ONNX element type) names BFLOAT16 by hand."""
    from onnx_precision.float_types import LOW_PRECISIONS
    from onnx_precision.plan import Precision
    from onnx_precision.trt.versions import TRTEXEC_LOW_TYPES
    assert {p.value for p in Precision if p.is_low} == set(LOW_PRECISIONS) == set(TRTEXEC_LOW_TYPES)
    naming = set()
    for module, path in _modules().items():
        if any(isinstance(n, ast.Attribute) and n.attr == "BFLOAT16" for n in ast.walk(_tree(path))):
            naming.add(module)
    assert naming == {"onnx_precision.float_types", "onnx_precision.typing_rules.types"}
