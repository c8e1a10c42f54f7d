"""Partition shapes, pure: faults as data, no network touched.

A shape is a "who hears whom" graph (networkx `DiGraph`, an edge a -> b meaning a accepts
traffic from b); its grudge, node -> the nodes whose traffic it drops, is the graph's
complement (`hears`, `grudge_of`, `reach_graph`). Shapes, after Jepsen's nemesis:

- `one_node`: one node cut off from all the others;
- `halves`: a majority and a minority (equal halves for even n) that cannot reach each other;
- `majorities_ring`: nodes in a ring, each hears a majority centred on itself, no two the same
  majority (with 3 nodes this is necessarily one-way: a hears b, b hears c, c hears a);
- `bridge`: two halves that only one node in the middle hears, and it hears both;
- `client_isolate`: one client cut off from the lock service but not the resource
  (`cut="service"`), or from the resource but not the lock service (`cut="resource"`).

`side_split` and `side_of` place the primary on the minority or majority side of a one-node or
halves shape; `describe` is a grudge's JSON form for the history. clusters/faults/partition.py
carries them out. networkx (the `run` extra's) is imported where a graph is made, so that the
fault's descriptor can be listed (doctor, plugins, --help) on a core install.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Literal

from fencecheck.clusters.base import ClusterError, Grudge

if TYPE_CHECKING:
    import networkx as nx


def hears(nodes: Iterable[str], groups: Iterable[Iterable[str]]) -> nx.DiGraph:
    """The graph in which every node hears exactly the nodes of its own groups."""
    import networkx as nx

    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    for group in groups:
        members = list(group)
        g.add_edges_from((a, b) for a in members for b in members if a != b)
    return g


def grudge_of(graph: nx.DiGraph) -> dict[str, frozenset[str]]:
    """node -> the nodes it drops: the complement of who it hears."""
    import networkx as nx

    comp = nx.complement(graph)
    return {str(n): frozenset(str(m) for m in comp.successors(n)) for n in graph.nodes}


def reach_graph(grudge: Grudge, nodes: Iterable[str]) -> nx.DiGraph:
    """The inverse of `grudge_of`, for reports that draw a partition."""
    import networkx as nx

    ns = list(nodes)
    g = nx.DiGraph()
    g.add_nodes_from(ns)
    g.add_edges_from(
        (a, b) for a in ns for b in ns if a != b and b not in grudge.get(a, frozenset())
    )
    return g


def one_node(nodes: Sequence[str], rng: random.Random) -> dict[str, frozenset[str]]:
    _need(nodes, 2, "one-node")
    lone = rng.choice(list(nodes))
    return grudge_of(hears(nodes, [[lone], [n for n in nodes if n != lone]]))


def halves(nodes: Sequence[str], rng: random.Random) -> dict[str, frozenset[str]]:
    """Two random halves, the smaller one n//2 nodes (Jepsen's bisect): a majority and a
    minority for odd n; for even n two equal halves, neither of which has a quorum."""
    _need(nodes, 2, "halves")
    order = _shuffled(nodes, rng)
    m = len(order) // 2
    return grudge_of(hears(nodes, [order[:m], order[m:]]))


def majorities_ring(nodes: Sequence[str], rng: random.Random) -> dict[str, frozenset[str]]:
    """Each node hears a majority centred on itself in a random ring; no two the same one."""
    import networkx as nx

    _need(nodes, 3, "majorities-ring")
    order = _shuffled(nodes, rng)
    n = len(order)
    m = n // 2 + 1
    before = (m - 1) // 2
    g = nx.DiGraph()
    g.add_nodes_from(order)
    for i, a in enumerate(order):
        for k in range(m):
            b = order[(i - before + k) % n]
            if b != a:
                g.add_edge(a, b)
    return grudge_of(g)


def bridge(nodes: Sequence[str], rng: random.Random) -> dict[str, frozenset[str]]:
    """Two halves that cannot reach each other; one node in the middle reaches both."""
    _need(nodes, 3, "bridge")
    order = _shuffled(nodes, rng)
    mid = len(order) // 2
    left, middle, right = order[:mid], order[mid], order[mid + 1 :]
    return grudge_of(hears(nodes, [[*left, middle], [middle, *right]]))


def client_isolate(
    client: str,
    servers: Sequence[str],
    resource: str,
    *,
    cut: Literal["service", "resource"] = "service",
) -> dict[str, frozenset[str]]:
    """Cut `client` off from the lock service (it still reaches the resource), or with
    cut="resource" from the resource (it still reaches the lock service). Both ways."""
    if cut == "service":
        away = [s for s in servers if s != resource]
    elif cut == "resource":
        away = [resource]
    else:
        raise ClusterError(f"client-isolate: bad cut {cut!r}")
    nodes = [client, resource, *servers]
    g = hears(nodes, [nodes])
    for s in away:
        g.remove_edges_from([(client, s), (s, client)])
    return {n: d for n, d in grudge_of(g).items() if d}


SIDED = ("one-node", "halves")  # shapes that cut a minority of the servers off the rest
SIDES = ("minority", "majority")  # the side the primary is on ("minority" with no primary)


def side_split(nodes: Sequence[str], shape: str, side: str, primary: str | None,
               rng: random.Random) -> dict[str, frozenset[str]]:
    """A one-node or halves grudge whose minority holds `primary` (side "minority") or does
    not (side "majority"), the other members drawn from rng; with no primary among the nodes, a
    minority drawn from rng. How a replay aims a partition at a role rather than at names."""
    _need(nodes, 2, shape)
    if shape not in SIDED or side not in SIDES:
        raise ClusterError(f"partition: no side {side!r} of shape {shape!r}")
    order = sorted(nodes)
    k = 1 if shape == "one-node" else len(order) // 2
    if primary in order:
        others = [n for n in order if n != primary]
        cut = [primary, *rng.sample(others, k - 1)] if side == "minority" else rng.sample(others, k)
    else:
        cut = rng.sample(order, k)
    return grudge_of(hears(nodes, [cut, [n for n in order if n not in cut]]))


def side_of(nodes: Sequence[str], grudge: Grudge, primary: str | None) -> str:
    """Which side of a one-node or halves grudge `primary` is on: "minority" if it is in the
    smaller group (or there is no primary), else "majority"."""
    groups = {frozenset(n2 for n2 in nodes if n2 not in grudge.get(n, frozenset()))
              for n in nodes}
    smallest = min(groups, key=lambda g: (len(g), sorted(g)))
    return "majority" if primary in nodes and primary not in smallest else "minority"


def _need(nodes: Sequence[str], k: int, shape: str) -> None:
    if len(set(nodes)) < k:
        raise ClusterError(f"{shape} needs at least {k} nodes, got {list(nodes)}")


def _shuffled(nodes: Sequence[str], rng: random.Random) -> list[str]:
    order = sorted(nodes)  # the seed alone decides, whatever order the caller passed
    rng.shuffle(order)
    return order


def describe(grudge: Grudge) -> dict[str, list[str]]:
    """JSON-friendly form of a grudge, for the history; nodes that drop nothing are left out."""
    return {n: sorted(d) for n, d in sorted(grudge.items()) if d}
