"""The membership fault's logic without servers (a fake of the Reconfigurable protocol, pure
bookkeeping): a start removes the node it names or the leader of the moment, one member out at a
time; a stop adds fresh members back; `heal` restores every node after a start that stopped
halfway, and is idempotent; a leader start is recorded by role. Also the backend options the
services read (--backend-opt): declared, validated naming the field, resolved with defaults."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from fencecheck.clusters.base import ClusterError, NemesisOp, Reconfigurable
from fencecheck.clusters.faults.membership import LEADER, MembershipNemesis
from fencecheck.descriptors import catalog
from fencecheck.descriptors.base import RECONFIG
from fencecheck.nemesis.faults.base import PRIMARY, FaultOptions, RoleTargets, ScheduleView
from fencecheck.nemesis.faults.membership import MembershipFault
from fencecheck.run import wiring
from fencecheck.run.config import ConfigError, make_config
from tests.conftest import run_fencecheck


class FakeEnsemble:
    """Members by node; a fresh member gets the next id. `fail_remove`: the removal's server
    stop fails after the configuration changed (a half-done start)."""

    def __init__(self, nodes: list[str], leader: str) -> None:
        self.config = {n: str(i) for i, n in enumerate(nodes, start=1)}
        self.next_id = len(nodes) + 1
        self.lead: str | None = leader
        self.fail_remove = False
        self.calls: list[str] = []

    def members(self) -> dict[str, str]:
        return dict(self.config)

    def leader(self) -> str | None:
        return self.lead

    def remove_member(self, node: str) -> dict[str, Any]:
        self.calls.append(f"remove {node}")
        member = self.config.pop(node)
        if self.fail_remove:
            raise ClusterError("kill failed")
        if self.lead == node:
            self.lead = None
        return {"member": member}

    def add_member(self, node: str) -> dict[str, Any]:
        self.calls.append(f"add {node}")
        if node not in self.config:
            self.config[node] = str(self.next_id)
            self.next_id += 1
        return {"member": self.config[node]}


NODES = ["n1", "n2", "n3"]


def test_the_fake_is_what_the_fault_calls() -> None:
    assert isinstance(FakeEnsemble(NODES, "n1"), Reconfigurable)


def test_a_leader_start_removes_the_leader_and_stop_adds_a_fresh_member() -> None:
    ens = FakeEnsemble(NODES, "n2")
    nem = MembershipNemesis(ens, NODES)
    started = nem.invoke(NemesisOp("start-membership", {"node": LEADER}))
    assert started == {"removed": "n2", "was_leader": True, "member": "2"}
    assert set(ens.members()) == {"n1", "n3"}
    stopped = nem.invoke(NemesisOp("stop-membership"))
    assert stopped == {"added": {"n2": {"member": "4"}}}
    assert ens.members() == {"n1": "1", "n3": "3", "n2": "4"}  # same nodes, a fresh member


def test_one_member_out_at_a_time() -> None:
    ens = FakeEnsemble(NODES, "n1")
    nem = MembershipNemesis(ens, NODES)
    nem.invoke(NemesisOp("start-membership", {"node": "n3"}))
    again = nem.invoke(NemesisOp("start-membership", {"node": "n1"}))
    assert "skipped" in again and set(ens.members()) == {"n1", "n2"}


def test_heal_restores_a_half_done_removal_and_is_idempotent() -> None:
    ens = FakeEnsemble(NODES, "n1")
    ens.fail_remove = True
    nem = MembershipNemesis(ens, NODES)
    with pytest.raises(ClusterError):
        nem.invoke(NemesisOp("start-membership", {"node": "n1"}))
    assert set(ens.members()) == {"n2", "n3"}
    nem.heal()
    assert set(ens.members()) == set(NODES)
    calls = len(ens.calls)
    nem.heal()
    assert len(ens.calls) == calls  # nothing removed, nothing missing: nothing to add
    assert set(ens.members()) == set(NODES)


def test_heal_without_any_removal_asks_nothing() -> None:
    ens = FakeEnsemble(NODES, "n1")
    MembershipNemesis(ens, NODES).heal()
    assert ens.calls == []


def _fault() -> MembershipFault:
    return MembershipFault(FaultOptions("r", Path("."), "etcd", 2000, "holder", (1.0, 2.0),
                                        random.Random(1)))


def test_a_leader_start_is_recorded_by_role_a_named_one_as_named() -> None:
    fault = _fault()
    assert isinstance(fault, RoleTargets)
    assert fault.recorded({"node": LEADER}, {"removed": "n2"}) == (PRIMARY, {"node": LEADER})
    assert fault.recorded({"node": "n3"}, {"removed": "n3"}) is None
    view = ScheduleView(["c1", "c2"], NODES, ["c1"], "c1", True)
    drawn = [fault.targets(random.Random(s), view)["node"] for s in range(20)]
    assert LEADER in drawn and set(drawn) - {LEADER} <= set(NODES)


def test_backends_that_declare_it_build_a_reconfigurable_service() -> None:
    able = [b.name for b in catalog.backends().values() if RECONFIG in b.capabilities]
    assert {"etcd", "zookeeper"} <= set(able)
    for name in able:
        assert isinstance(wiring.make_service(make_config(backend=name)), Reconfigurable)


def test_a_backend_without_it_is_refused_naming_both() -> None:
    with pytest.raises(ConfigError, match="membership: not supported by backend 'redis'"):
        wiring.check_compatible(make_config(backend="redis", nemesis=("membership",)))


def test_the_durability_options_reach_the_services() -> None:
    zk = make_config(backend="zookeeper", backend_options={"forceSync": "no"})
    assert zk.settings("backend") == {"forceSync": "no"}
    assert make_config(backend="zookeeper").settings("backend") == {"forceSync": "yes"}
    assert wiring.make_service(zk).force_sync == "no"  # type: ignore[attr-defined]
    nats = make_config(backend="nats", backend_options={"sync_interval": "always"})
    assert wiring.make_service(nats).sync_interval == "always"  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="forceSync"):
        make_config(backend="zookeeper", backend_options={"forceSync": "maybe"})


def test_a_bad_backend_option_is_exit_3_naming_the_field(tmp_path: Path) -> None:
    r = run_fencecheck("run", "--store", str(tmp_path), "--backend", "zookeeper",
                       "--backend-opt", "forceSync=maybe", timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "forceSync" in r.stderr and "maybe" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
