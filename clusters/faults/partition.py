"""Network partitions: grudge shapes (pure), `IptablesNet` (the `Net` on iptables inside node
namespaces) and `PartitionNemesis` (what the controller's schedule invokes).

Faults are data. A shape is a "who hears whom" graph (networkx `DiGraph`, an edge a -> b meaning
a accepts traffic from b); its grudge, node -> the nodes whose traffic it drops, is the graph's
complement. Shapes, after Jepsen's nemesis:

- `one_node`: one node cut off from all the others;
- `halves`: a majority and a minority (equal halves for even n) that cannot reach each other;
- `majorities_ring`: nodes in a ring, each hears a majority centred on itself, no two the same
  majority (with 3 nodes this is necessarily one-way: a hears b, b hears c, c hears a);
- `bridge`: two halves that only one node in the middle hears, and it hears both;
- `client_isolate`: one client cut off from the lock service but not the resource
  (`cut="service"`), or from the resource but not the lock service (`cut="resource"`).

`IptablesNet` drops by source address in a chain of its own, `FC-<run>`, in each node's
namespace (created with a jump from INPUT on first use, recorded in the ledger first); `heal`
flushes only that chain and is idempotent. INPUT DROP also drops packets of established TCP
connections, so a partition bites at once, not at the next connect.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import networkx as nx

from fencecheck.clusters.base import (
    Cluster,
    ClusterError,
    ControlChannel,
    Grudge,
    NemesisOp,
    Remote,
    RemoteError,
    namespace_of,
)
from fencecheck.clusters.cleaner import NETNS_DIR, NETNS_NAME_RE, Ledger, check_run_id

log = logging.getLogger(__name__)

# --- shapes (pure) ----------------------------------------------------------------------------


def hears(nodes: Iterable[str], groups: Iterable[Iterable[str]]) -> nx.DiGraph:
    """The graph in which every node hears exactly the nodes of its own groups."""
    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    for group in groups:
        members = list(group)
        g.add_edges_from((a, b) for a in members for b in members if a != b)
    return g


def grudge_of(graph: nx.DiGraph) -> dict[str, frozenset[str]]:
    """node -> the nodes it drops: the complement of who it hears."""
    comp = nx.complement(graph)
    return {str(n): frozenset(str(m) for m in comp.successors(n)) for n in graph.nodes}


def reach_graph(grudge: Grudge, nodes: Iterable[str]) -> nx.DiGraph:
    """The inverse of `grudge_of`, for reports that draw a partition."""
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


# --- iptables ---------------------------------------------------------------------------------


def chain_name(run_id: str) -> str:
    return f"FC-{run_id}"


class IptablesNet:
    """`Net` on iptables inside each node (INPUT DROP by source address in chain FC-<run>).
    A node the controller drives over this network (`ControlChannel`: SSH) keeps that session:
    on a clients' host (the controller on the SSH runtime) cut off from a server, dropping the
    server's packets would drop its SSH replies too, and the fault could neither start nor heal
    (a 30 s channel timeout each)."""

    def __init__(
        self, remotes: Mapping[str, Remote], run_id: str, ledger: Ledger | None = None
    ) -> None:
        self.remotes = dict(remotes)
        self.run_id = check_run_id(run_id)
        self.chain = chain_name(run_id)
        self.ledger = ledger
        self._chains: set[str] = set()  # nodes where our chain and its jump exist

    def drop(self, grudge: Grudge, *, probability: float = 1.0) -> None:
        """Add DROP rules: each node drops traffic from the nodes in its grudge. Additive.
        With probability < 1, each packet is dropped at random with that probability
        (packet loss through iptables `statistic`: this kernel has no `tc netem`)."""
        if not 0.0 < probability <= 1.0:
            raise ClusterError(f"drop: probability {probability} not in (0, 1]")
        loss = "" if probability == 1.0 else (
            f" -m statistic --mode random --probability {probability:.4f}"
        )
        for node, sources in sorted(grudge.items()):
            if not sources:
                continue
            remote = self._remote(node)
            lines = ["*filter"]
            if node not in self._chains:
                self._record_chain(node, remote)
                self._chains.add(node)  # before creating: heal must find it even half-made
                lines += [f":{self.chain} - [0:0]", f"-I INPUT 1 -j {self.chain}"]
            if isinstance(remote, ControlChannel):  # the controller's session to node: ahead
                # of this call's DROPs (heal flushes the chain, so each call adds it again)
                lines.append(f"-A {self.chain} -p tcp --dport {remote.control_port} -j RETURN")
            for src in sorted(sources):
                source = self._remote(src)
                if isinstance(source, ControlChannel):  # src's replies to the controller
                    lines.append(f"-A {self.chain} -s {source.address}/32 -p tcp "
                                 f"--sport {source.control_port} -j RETURN")
                lines.append(f"-A {self.chain} -s {source.address}/32{loss} -j DROP")
            lines.append("COMMIT")
            remote.run(
                ["iptables-restore", "-w", "--noflush"], stdin=("\n".join(lines) + "\n").encode()
            )
        log.info("partition %s: dropping %s (p=%s)", self.run_id, describe(grudge), probability)

    def heal(self) -> None:
        """Flush our chain on every node that has one; rules of others are never touched."""
        errors = []
        for node in sorted(self._chains):
            try:
                self._remote(node).run(["iptables", "-w", "-F", self.chain])
            except RemoteError as e:  # keep healing the others; report all at the end
                gone = "No chain" in e.result.stderr or _namespace_gone(self._remote(node))
                if gone:  # no chain, no rules: healed (and made afresh on the next drop)
                    self._chains.discard(node)
                else:
                    errors.append(str(e))
        if errors:
            raise ClusterError("heal: " + "; ".join(errors))

    def rules(self, node: str) -> list[str]:
        """Our chain's rules on node (`iptables -S`), for tests and the report."""
        if node not in self._chains:
            return []
        out = self._remote(node).run(["iptables", "-w", "-S", self.chain]).stdout
        return [x for x in out.splitlines() if x.startswith("-A ")]

    def _remote(self, node: str) -> Remote:
        try:
            return self.remotes[node]
        except KeyError:
            raise ClusterError(f"partition: unknown node {node!r}") from None

    def _record_chain(self, node: str, remote: Remote) -> None:
        if self.ledger is None:
            return
        ns = namespace_of(remote)
        if ns is not None:
            self.ledger.record("chain", self.chain, node=node, ns=ns)
        else:
            # Not in one of our namespaces: the runtime that owns the node must register an
            # undo for this kind (clusters.cleaner.register_undo), or teardown reports it.
            self.ledger.record("remote-chain", self.chain, node=node)


# --- the nemesis --------------------------------------------------------------------------------

SERVER_SHAPES = {
    "one-node": one_node,
    "halves": halves,
    "majorities-ring": majorities_ring,
    "bridge": bridge,
}
SHAPES = (*SERVER_SHAPES, "client-isolate")


class PartitionNemesis:
    """`start-partition` picks a shape (seeded) and drops; `stop-partition` heals.

    The start value may name the lock `holder` (a client node, or None) and `clients`; a holder
    is cut off from the service half the time, the case where a lease runs out under a client
    that keeps writing. The op's completion records {"shape", "grudge"}, and for a one-node or
    halves shape the `side` the primary is on (`primary`: the service's, where it has one).
    A replayed start may instead carry a recorded `grudge` (dropped as it is) or a `shape` and
    `side` (resolved now: the minority with the primary of this moment, `side_split`).
    """

    name = "partition"

    def __init__(
        self,
        cluster: Cluster,
        servers: Sequence[str],
        resource: str,
        *,
        run_id: str | None = None,
        ledger: Ledger | None = None,
        rng: random.Random | None = None,
        shapes: Sequence[str] = SHAPES,
        primary: Callable[[], str] | None = None,
    ) -> None:
        self.primary = primary
        remotes: dict[str, Remote] = dict(cluster.servers)
        for name, c in cluster.clients.items():
            if not hasattr(c, "run"):
                raise ClusterError(f"partition: client node {name} cannot run iptables")
            remotes[name] = c  # type: ignore[assignment]
        self.servers = list(servers)
        self.resource = resource
        self.clients = list(cluster.clients)
        self.rng = rng if rng is not None else random.Random(0)
        bad = [s for s in shapes if s not in SHAPES]
        if bad:
            raise ClusterError(f"partition: unknown shapes {bad}; known: {list(SHAPES)}")
        self.shapes = [s for s in shapes if self._fits(s)]
        if not self.shapes:
            raise ClusterError(f"partition: no shape of {list(shapes)} fits {self.servers}")
        self.net = IptablesNet(remotes, run_id or _run_of(remotes), ledger)
        self.net.heal()  # Jepsen heals on setup too; a no-op on fresh nodes

    def _fits(self, shape: str) -> bool:
        if shape == "client-isolate":
            return bool(self.clients)
        least = 2 if shape in ("one-node", "halves") else 3
        return len(self.servers) >= least

    def invoke(self, op: NemesisOp) -> Any:
        if op.f == "start-partition":
            value = op.value if isinstance(op.value, Mapping) else {}
            shape, grudge = self._resolve(value)
            self.net.drop(grudge)
            out: dict[str, Any] = {"shape": shape, "grudge": describe(grudge)}
            if shape in SIDED:
                out["side"] = side_of(self.servers, grudge, self._primary())
            return out
        if op.f == "stop-partition":
            self.net.heal()
            return {"healed": True}
        raise ClusterError(f"partition nemesis: unknown op {op.f!r}")

    def _resolve(self, value: Mapping[str, Any]) -> tuple[str, dict[str, frozenset[str]]]:
        pinned, shape, side = value.get("grudge"), value.get("shape"), value.get("side")
        if isinstance(pinned, Mapping):
            known = {*self.servers, *self.clients, self.resource}
            grudge = {str(n): frozenset(map(str, d)) for n, d in pinned.items()}
            strangers = sorted(({*grudge} | set().union(*grudge.values())) - known)
            if strangers:
                raise ClusterError(f"partition: recorded grudge names unknown nodes {strangers}")
            return str(shape or "recorded"), grudge
        if shape in SIDED and side in SIDES:
            return str(shape), side_split(self.servers, str(shape), str(side), self._primary(),
                                          self.rng)
        return self.pick(value.get("holder"), value.get("clients"))

    def _primary(self) -> str | None:
        if self.primary is None:
            return None
        try:
            return self.primary()
        except ClusterError:  # the sentinels disagree: no primary to aim at
            return None

    def pick(
        self, holder: str | None = None, clients: Sequence[str] | None = None
    ) -> tuple[str, dict[str, frozenset[str]]]:
        """The next shape and its grudge, from the seeded rng."""
        isolate = "client-isolate" in self.shapes
        if holder is not None and holder in self.clients and isolate and self.rng.random() < 0.5:
            return "client-isolate", client_isolate(holder, self.servers, self.resource)
        shape = self.rng.choice(self.shapes)
        if shape == "client-isolate":
            pool = [c for c in (clients or self.clients) if c in self.clients] or self.clients
            client = self.rng.choice(sorted(pool))
            cut: Literal["service", "resource"] = self.rng.choice(["service", "resource"])
            return shape, client_isolate(client, self.servers, self.resource, cut=cut)
        return shape, SERVER_SHAPES[shape](self.servers, self.rng)

    def heal(self) -> None:
        self.net.heal()


def _run_of(remotes: Mapping[str, Remote]) -> str:
    """The run id from a node's namespace name (fc-<run>-<node>), for netns nodes."""
    for r in remotes.values():
        ns = namespace_of(r)
        m = NETNS_NAME_RE.match(ns) if ns is not None else None
        if m:
            return m.group(1)
    raise ClusterError("partition: pass run_id: the nodes are not netns nodes")


def _namespace_gone(remote: Remote) -> bool:
    ns = namespace_of(remote)
    return ns is not None and not (NETNS_DIR / ns).exists()
