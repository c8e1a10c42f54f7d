"""Tests of partitions: the shapes as pure functions (properties over node counts and seeds),
and, in namespaces, that a drop really blocks traffic and heal restores it."""

from __future__ import annotations

import random
import sys

import networkx as nx
import pytest

from fencecheck.clusters.base import ClusterError, Nemesis, NemesisOp, Net
from fencecheck.clusters.cleaner import teardown_records
from fencecheck.clusters.faults.grudges import (
    bridge,
    client_isolate,
    describe,
    halves,
    majorities_ring,
    one_node,
    reach_graph,
)
from fencecheck.clusters.faults.partition import IptablesNet, PartitionNemesis
from fencecheck.clusters.runtimes.netns import NetnsRuntime
from fencecheck.clusters.services.redis import RedisService

NODES = {n: [f"n{i}" for i in range(1, n + 1)] for n in range(1, 8)}
SEEDS = range(12)


def heard(grudge: dict[str, frozenset[str]], nodes: list[str], a: str) -> set[str]:
    """What a hears, itself included."""
    return {b for b in nodes if b not in grudge.get(a, frozenset())}


def symmetric(grudge: dict[str, frozenset[str]]) -> bool:
    return all(a in grudge.get(b, frozenset()) for a, d in grudge.items() for b in d)


@pytest.mark.parametrize("n", range(2, 8))
@pytest.mark.parametrize("seed", SEEDS)
def test_one_node(n: int, seed: int) -> None:
    nodes = NODES[n]
    g = one_node(nodes, random.Random(seed))
    lone = [a for a in nodes if heard(g, nodes, a) == {a}]
    assert len(lone) == (2 if n == 2 else 1)  # with two nodes, both are alone
    assert all(g[a] == {lone[0]} for a in nodes if a != lone[0])
    assert symmetric(g)


@pytest.mark.parametrize("n", range(2, 8))
@pytest.mark.parametrize("seed", SEEDS)
def test_halves(n: int, seed: int) -> None:
    nodes = NODES[n]
    g = halves(nodes, random.Random(seed))
    sides = {frozenset(heard(g, nodes, a)) for a in nodes}
    assert sorted(len(s) for s in sides) == [n // 2, n - n // 2]  # two sides, both non-empty
    assert frozenset().union(*sides) == frozenset(nodes)
    assert symmetric(g)


@pytest.mark.parametrize("n", range(3, 8))
@pytest.mark.parametrize("seed", SEEDS)
def test_majorities_ring(n: int, seed: int) -> None:
    nodes = NODES[n]
    g = majorities_ring(nodes, random.Random(seed))
    views = [frozenset(heard(g, nodes, a)) for a in nodes]
    assert all(len(v) == n // 2 + 1 for v in views)  # each hears a majority, itself included
    assert len(set(views)) == n  # no two the same majority
    if n >= 5:
        assert any(g.values())  # really a partition


@pytest.mark.parametrize("n", range(3, 8))
@pytest.mark.parametrize("seed", SEEDS)
def test_bridge(n: int, seed: int) -> None:
    nodes = NODES[n]
    g = bridge(nodes, random.Random(seed))
    middle = [a for a in nodes if not g[a]]
    assert len(middle) == 1
    assert all(middle[0] not in g[a] for a in nodes)
    rest = reach_graph(g, nodes)
    rest.remove_node(middle[0])
    parts = [len(c) for c in nx.weakly_connected_components(rest)]
    assert sorted(parts) == sorted([n // 2, n - n // 2 - 1])
    assert symmetric(g)


def test_shapes_are_seeded_and_order_free() -> None:
    a = halves(["n1", "n2", "n3", "n4", "n5"], random.Random(7))
    b = halves(["n5", "n4", "n3", "n2", "n1"], random.Random(7))
    assert a == b
    assert {str(sorted(halves(NODES[5], random.Random(s)).items())) for s in SEEDS} != {str(a)}


def test_too_few_nodes() -> None:
    with pytest.raises(ClusterError, match="at least 3"):
        majorities_ring(["n1", "n2"], random.Random(0))
    with pytest.raises(ClusterError, match="at least 2"):
        one_node(["n1"], random.Random(0))


def test_client_isolate_both_ways() -> None:
    g = client_isolate("c1", ["n1", "n2"], "r1")
    assert g == {"c1": {"n1", "n2"}, "n1": {"c1"}, "n2": {"c1"}}
    g = client_isolate("c1", ["n1", "n2"], "r1", cut="resource")
    assert g == {"c1": {"r1"}, "r1": {"c1"}}
    assert describe(g) == {"c1": ["r1"], "r1": ["c1"]}


# --- integration ------------------------------------------------------------------------------

CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
    print("ok")
except OSError as e:
    print(type(e).__name__)
"""


def reach(rt: NetnsRuntime, src: str, dst: str, timeout_s: float = 0.3) -> str:
    argv = [sys.executable, "-c", CONNECT, rt.address(dst), "6379", str(timeout_s)]
    return rt.remote(src).run(argv).stdout.strip()


@pytest.mark.netns
def test_drop_blocks_and_heal_restores(runtime: NetnsRuntime) -> None:
    cluster = runtime.setup(["n1", "n2", "r1"], ["c1"])
    svc = RedisService(ledger=runtime.ledger)
    remotes = {**cluster.servers, "c1": runtime.remote("c1")}
    net = IptablesNet(remotes, runtime.run_id, runtime.ledger)
    try:
        svc.setup(cluster.servers, runtime.run_dir)
        net.heal()  # before any drop: nothing to do
        assert reach(runtime, "c1", "n1") == "ok"
        # An established connection must be cut too, not only new ones.
        keep = runtime.remote("c1").spawn(
            ["redis-cli", "-h", runtime.address("n1"), "-p", "6379", "-i", "0.05", "-r", "-1",
             "ping"]
        )
        net.drop(client_isolate("c1", ["n1", "n2"], "r1"))
        assert net.rules("n1") == [f"-A FC-{runtime.run_id} -s 10.77.0.5/32 -j DROP"]
        assert reach(runtime, "c1", "n1") == "TimeoutError"
        assert reach(runtime, "c1", "n2") == "TimeoutError"
        assert reach(runtime, "c1", "r1") == "ok"  # the resource stays reachable
        assert reach(runtime, "n2", "n1") == "ok"
        net.heal()
        net.heal()  # idempotent
        assert net.rules("n1") == []
        assert reach(runtime, "c1", "n1") == "ok"
        keep.kill()
        keep.wait()
        # The chains were recorded before they were made.
        chains = [r for r in runtime.ledger.records() if r["kind"] == "chain"]
        assert {r["node"] for r in chains} == {"c1", "n1", "n2"}
    finally:
        net.heal()
        svc.teardown()


@pytest.mark.netns
def test_partition_nemesis_ops(runtime: NetnsRuntime) -> None:
    cluster = runtime.setup(["n1", "n2", "n3", "r1"], ["c1", "c2"])
    nem: Nemesis = PartitionNemesis(
        cluster, ["n1", "n2", "n3"], "r1", ledger=runtime.ledger, rng=random.Random(3)
    )
    assert isinstance(nem, PartitionNemesis)
    assert nem.net.run_id == runtime.run_id  # found from the namespaces
    try:
        for _ in range(4):
            out = nem.invoke(NemesisOp("start-partition", {"holder": "c1", "clients": ["c1"]}))
            assert out["shape"] in ("one-node", "halves", "majorities-ring", "bridge",
                                    "client-isolate")
            assert out["grudge"]
            a, dropped = next(iter(out["grudge"].items()))
            assert reach(runtime, a, dropped[0]) == "TimeoutError"
            assert nem.invoke(NemesisOp("stop-partition")) == {"healed": True}
            assert reach(runtime, a, dropped[0]) in ("ok", "ConnectionRefusedError")
    finally:
        nem.heal()


@pytest.mark.netns
def test_chain_undo_from_ledger_leaves_namespace(runtime: NetnsRuntime) -> None:
    """The cleaner removes our chain and its jump from a namespace that is kept."""
    cluster = runtime.setup(["n1", "n2"], [])
    net = IptablesNet(cluster.servers, runtime.run_id, runtime.ledger)
    as_net: Net = net
    as_net.drop({"n1": frozenset({"n2"})})
    chains = [r for r in runtime.ledger.records() if r["kind"] == "chain"]
    errors: list[str] = []
    removed = teardown_records(chains, errors)
    assert removed == [f"chain FC-{runtime.run_id} in fc-{runtime.run_id}-n1"]
    assert errors == []
    rules = runtime.remote("n1").run(["iptables", "-S"]).stdout
    assert f"FC-{runtime.run_id}" not in rules
    assert teardown_records(chains, errors) == [] and errors == []  # already gone: success
    net.heal()  # the chain is gone from under it: no chain, no rules, healed
    net.drop({"n1": frozenset({"n2"})})  # and made afresh
    assert len(net.rules("n1")) == 1
    net.heal()


LOSS = """
import socket, sys
ok = 0
for _ in range(40):
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=0.05).close()
        ok += 1
    except OSError:
        pass
print(ok)
"""


@pytest.mark.netns
def test_packet_loss(runtime: NetnsRuntime) -> None:
    cluster = runtime.setup(["n1", "n2"], [])
    svc = RedisService()
    net = IptablesNet(cluster.servers, runtime.run_id)
    try:
        svc.setup({"n1": cluster.servers["n1"]}, runtime.run_dir)
        net.drop({"n1": frozenset({"n2"})}, probability=0.5)
        assert net.rules("n1") == [
            f"-A FC-{runtime.run_id} -s 10.77.0.3/32 -m statistic --mode random "
            "--probability 0.50000000000 -j DROP"
        ]
        argv = [sys.executable, "-c", LOSS, runtime.address("n1"), "6379"]
        ok = int(runtime.remote("n2").run(argv).stdout)
        assert 3 <= ok <= 37  # about half of 40 get through (p of failing: below 1e-7)
        with pytest.raises(ClusterError, match="probability"):
            net.drop({"n1": frozenset({"n2"})}, probability=0.0)
    finally:
        net.heal()
        svc.teardown()
