"""The import graph between the top-level packages has no cycle and only the edges the layout
promises: `records` (the files' record types) and `toolchain` (the build cache both builders use)
are the bottom, import no other package of the project and may be imported by every one;
`checker` and `descriptors` import no other package but `records`, `workloads` never imports
`clusters` nor `clusters` `workloads`, `reports` never runs anything, only `fencecheck` wires them
together.
Read from the source with ast (every import, including those inside functions)."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

from tests.conftest import REPO

PACKAGES = ("checker", "clusters", "descriptors", "records", "reports", "toolchain", "workloads")
# fencecheck/*.py and its rooms (the rest of fencecheck/ are links to the packages above)
CORE = "fencecheck"
ROOMS = ("cli", "run", "nemesis", "fleet", "api")
# the rooms of the core, by floor: the top imports anything below, nothing imports upward; `run`
# and `nemesis` are one floor (the controller carries out the schedule, which acts on the workers)
ROOM_ALLOWED = {
    "cli": {"run", "nemesis", "fleet", "api"},
    "fleet": {"run", "nemesis"},
    "api": {"run", "nemesis", "fleet"},
    "run": {"nemesis"},
    "nemesis": {"run"},
}
ALLOWED = {
    "records": set(),
    "toolchain": set(),
    "checker": {"records"},
    "descriptors": {"records"},
    "clusters": {"records", "toolchain"},
    "workloads": {"descriptors", "records", "toolchain"},
    "reports": {"checker", "records"},
    CORE: {"checker", "clusters", "descriptors", "records", "reports", "toolchain", "workloads"},
}


def _package_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "fencecheck":
        return None
    if len(parts) > 1 and parts[1] in PACKAGES:
        return parts[1]
    return CORE


def _core_files() -> list[Path]:
    core = REPO / "fencecheck"
    return [*core.glob("*.py"), *(f for room in ROOMS for f in (core / room).rglob("*.py"))]


def _sources(package: str) -> list[ast.Module]:
    files = _core_files() if package == CORE else list((REPO / package).rglob("*.py"))
    return [ast.parse(f.read_text(), str(f)) for f in files]


def graph() -> nx.DiGraph:
    g = nx.DiGraph()
    for pkg in (*PACKAGES, CORE):
        g.add_node(pkg)
        for tree in _sources(pkg):
            for node in ast.walk(tree):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                for name in names:
                    dep = _package_of(name)
                    if dep is not None and dep != pkg:
                        g.add_edge(pkg, dep)
    return g


def test_the_package_graph_has_no_cycle_and_only_allowed_edges() -> None:
    g = graph()
    assert nx.is_directed_acyclic_graph(g), list(nx.simple_cycles(g))
    for pkg, deps in ALLOWED.items():
        assert set(g.successors(pkg)) <= deps, (pkg, set(g.successors(pkg)) - deps)


def test_records_is_the_bottom_every_package_may_import() -> None:
    assert ALLOWED["records"] == set()
    assert all("records" in deps for pkg, deps in ALLOWED.items()
               if pkg not in ("records", "toolchain"))  # the two bottoms
    g = graph()
    assert set(g.successors("records")) == set()
    # the records are used, not just allowed: the readers and writers of the files go through them
    assert {"checker", "reports", CORE} <= set(g.predecessors("records"))


def room_graph() -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(ROOMS)
    core = REPO / "fencecheck"
    for room in ROOMS:
        for f in (core / room).rglob("*.py"):
            for node in ast.walk(ast.parse(f.read_text(), str(f))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                for name in names:
                    parts = name.split(".")
                    if parts[0] == "fencecheck" and len(parts) > 1 and parts[1] in ROOMS \
                            and parts[1] != room:
                        g.add_edge(room, parts[1])
    return g


def test_the_rooms_import_only_downward() -> None:
    g = room_graph()
    for room, deps in ROOM_ALLOWED.items():
        assert set(g.successors(room)) <= deps, (room, set(g.successors(room)) - deps)
    # nothing below the CLI reaches up into it, and the API is a leaf for the CLI only
    assert set(g.predecessors("cli")) == set()
    assert set(g.predecessors("api")) <= {"cli"}


def test_the_core_is_rooms_not_a_flat_folder() -> None:
    flat = sorted(p.name for p in (REPO / "fencecheck").glob("*.py"))
    assert flat == ["__init__.py", "__main__.py"], flat
