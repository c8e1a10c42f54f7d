"""The import graph between the top-level packages has no cycle and only the edges the layout
promises: `records` (the files' record types) and `toolchain` (the build cache both builders use)
are the bottom, import no other package of the project and may be imported by every one;
`checker` and `descriptors` import no other package but `records`, `workloads` never imports
`clusters` nor `clusters` `workloads`, `reports` never runs anything, only `fencecheck` wires them
together.
Read from the source with ast (every import, including those inside functions)."""

from __future__ import annotations

import ast

import networkx as nx

from tests.conftest import REPO

PACKAGES = ("checker", "clusters", "descriptors", "records", "reports", "toolchain", "workloads")
CORE = "fencecheck"  # fencecheck/*.py and fencecheck/faults/ (the rest are links to the above)
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


def _sources(package: str) -> list[ast.Module]:
    if package == CORE:
        core = REPO / "fencecheck"
        files = [*core.glob("*.py"), *(core / "faults").rglob("*.py")]
    else:
        files = list((REPO / package).rglob("*.py"))
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
