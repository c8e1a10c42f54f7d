"""Sizes (issue 25): no module of the project's packages over 400 lines, no function over 80,
outside an explicit allow-list: the checker's hot loops.

Walks every .py of the packages (checker, clusters, descriptors, records, reports, toolchain,
workloads, and fencecheck's own modules and rooms; not tests/ or benchmarks/) with `ast`. A
function's length runs from its `def` line to its last line, a nested function counted on its
own as well as in its parent. An allow-listed entry that no longer exceeds its limit fails too,
so that the list only shrinks.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("checker", "clusters", "descriptors", "records", "reports", "toolchain", "workloads")
ROOMS = ("cli", "run", "nemesis", "fleet", "api")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80

# (module, function) -> why it may be longer. The checker's hot loops run once per op of
# histories of 10^5-10^6 ops: a call per step costs measurably there (benchmarks/), and each is
# one state machine read best in one piece.
LONG_FUNCTIONS: dict[tuple[str, str], str] = {
    # the fast loader's pairing loop: invoke/completion per process, inlined for speed
    ("checker/fastload.py", "_pair"): "hot loop: pairs every event of the fast load path",
    # one pass over all ops keeping every lock's grant state (leases, renewals, releases)
    ("checker/grants.py", "build_grants"): "hot loop: the grant state machine over every op",
    ("checker/grants.py", "build_grants.lock_op"): "hot loop: the grant state machine's step",
    # the reference of checker/_rwpass.c: reads, writes and the nemesis' ops of that pass
    ("checker/rwpass.py", "_rw_pass"): "hot loop: tallies every op, keeps reads and writes",
    # read, validate and pair in one pass: the checker's default load path
    ("checker/history.py", "load_ops"): "hot loop: reads, validates and pairs every line",
    # the linearizability search (Porcupine's algorithm): backtracking with a cache of states
    ("checker/linear/search.py", "search"): "hot loop: the linearizability search",
}

# module -> why it may be longer than MAX_MODULE_LINES.
LONG_MODULES: dict[str, str] = {}


def project_modules() -> list[Path]:
    """Every .py of the packages and of fencecheck's rooms; fencecheck/'s links to the packages
    (fencecheck/checker -> ../checker) are not walked twice."""
    files = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
    files += sorted((ROOT / "fencecheck").glob("*.py"))
    files += [p for room in ROOMS for p in sorted((ROOT / "fencecheck" / room).rglob("*.py"))]
    return files


def function_lengths(tree: ast.AST) -> dict[str, int]:
    """Qualified name (`Class.method`, `outer.inner`) -> lines from `def` to its end."""
    out: dict[str, int] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + child.name
                out[name] = (child.end_lineno or child.lineno) - child.lineno + 1
                walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".")
            else:
                walk(child, prefix)

    walk(tree, "")
    return out


@functools.cache
def measure() -> tuple[dict[str, int], dict[tuple[str, str], int]]:
    """Lines of every module and of every function in it, read once per session."""
    modules: dict[str, int] = {}
    functions: dict[tuple[str, str], int] = {}
    for path in project_modules():
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        modules[rel] = len(text.splitlines())
        for name, n in function_lengths(ast.parse(text, rel)).items():
            functions[(rel, name)] = n
    return modules, functions


def test_the_walk_sees_every_package_and_room() -> None:
    modules, functions = measure()
    for where in (*PACKAGES, *(f"fencecheck/{room}" for room in ROOMS)):
        assert any(m.startswith(where + "/") for m in modules), where
    assert not any(m.startswith(("tests/", "benchmarks/", "fencecheck/checker/")) for m in modules)
    assert ("checker/linear/search.py", "search") in functions


def test_no_module_over_400_lines() -> None:
    modules, _ = measure()
    over = {m: n for m, n in modules.items() if n > MAX_MODULE_LINES and m not in LONG_MODULES}
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split them by role): {over}"


def test_no_function_over_80_lines() -> None:
    _, functions = measure()
    over = {f"{m}:{f}": n for (m, f), n in functions.items()
            if n > MAX_FUNCTION_LINES and (m, f) not in LONG_FUNCTIONS}
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines: {over}"


def test_an_allowed_long_module_is_still_long() -> None:
    """(The list is empty now; a module put back on it must still be long.)"""
    modules, _ = measure()
    for module in sorted(LONG_MODULES):
        assert module in modules, f"{module}: gone: remove it from LONG_MODULES"
        assert modules[module] > MAX_MODULE_LINES, f"{module} fits now: remove it from " \
            "LONG_MODULES"


@pytest.mark.parametrize("key", sorted(LONG_FUNCTIONS), ids=lambda k: f"{k[0]}:{k[1]}")
def test_an_allowed_long_function_is_still_long(key: tuple[str, str]) -> None:
    _, functions = measure()
    assert key in functions, f"{key}: gone: remove it from LONG_FUNCTIONS"
    assert functions[key] > MAX_FUNCTION_LINES, f"{key} fits now: remove it from LONG_FUNCTIONS"


def test_the_measure_counts_a_long_function_and_a_nested_one() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(85))
    src = f"class C:\n    def m(self):\n        def inner():\n            pass\n{body}\n"
    lengths = function_lengths(ast.parse(src.replace("\n    x", "\n        x")))
    assert lengths["C.m.inner"] == 2
    assert lengths["C.m"] == 88
