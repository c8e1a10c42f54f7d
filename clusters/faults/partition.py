"""Network partitions carried out: `IptablesNet` (the `Net` on iptables inside node namespaces)
and `PartitionNemesis` (what the controller's schedule invokes). The shapes themselves, pure
data, are in clusters/faults/grudges.py.

`IptablesNet` drops by source address in a chain of its own, `FC-<run>`, in each node's
namespace (created with a jump from INPUT on first use, recorded in the ledger first); `heal`
flushes only that chain and is idempotent. INPUT DROP also drops packets of established TCP
connections, so a partition bites at once, not at the next connect.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

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
from fencecheck.clusters.faults.grudges import (
    SIDED,
    SIDES,
    bridge,
    client_isolate,
    describe,
    halves,
    majorities_ring,
    one_node,
    side_of,
    side_split,
)

log = logging.getLogger(__name__)

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
