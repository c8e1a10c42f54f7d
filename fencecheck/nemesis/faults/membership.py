"""The `membership` fault: while clients hold the lock, remove one node's member from the
service's configuration (etcd `member remove`, ZooKeeper `reconfig -remove`) and stop its
server; on stop, add a fresh member on that node (a new id, an empty data directory: etcd
`member add` and a server started with `--initial-cluster-state existing`, ZooKeeper `reconfig
-add` and a server with a new myid) and wait until it serves. Every exit path ends with each
node holding a serving member: the original size, on the original nodes
(clusters/faults/membership.py).

Holder-aware: a start waits for a fresh grant, and half the starts remove whichever member
leads at that moment (recorded by role, "primary", so a replay removes the leader of its own
run); the others remove a node drawn by the seed (recorded by name).

A service offers it by declaring the `reconfigure` capability (descriptors/base.py: RECONFIG)
and implementing `Reconfigurable`. Netns only: ZooKeeper's reconfiguration runs this host's
Python (kazoo) on a node, which only netns nodes share.
"""

from __future__ import annotations

import random
from typing import Any

from fencecheck.clusters.base import ClusterError, Reconfigurable
from fencecheck.clusters.faults.membership import LEADER, MembershipNemesis
from fencecheck.descriptors.base import RECONFIG, FaultDescriptor
from fencecheck.nemesis.faults.base import PRIMARY, FaultContext, FaultOptions, ScheduleView
from fencecheck.nemesis.faults.nemesis_fault import NemesisFault

DESCRIPTOR = FaultDescriptor(
    name="membership",
    factory="fencecheck.nemesis.faults.membership:MembershipFault",
    summary="remove a member (the leader or another) and add a fresh one, while a lock is held",
    requires=frozenset({RECONFIG}),
    runtimes=frozenset({"netns"}),
)

MIN_MEMBERS = 3  # with fewer, a member removed takes the quorum with it


class MembershipFault(NemesisFault):
    name = "membership"

    def __init__(self, opts: FaultOptions) -> None:
        self.opts = opts

    def bind(self, ctx: FaultContext) -> None:
        if not isinstance(ctx.service, Reconfigurable):
            raise ClusterError(f"membership: {self.opts.backend} declares {RECONFIG} but "
                               "cannot change its members")
        if len(ctx.servers) < MIN_MEMBERS:
            raise ClusterError(f"membership: needs at least {MIN_MEMBERS} server nodes, not "
                               f"{len(ctx.servers)} (--nodes)")
        self.nemesis = MembershipNemesis(ctx.service, list(ctx.servers))

    def hold_range_s(self) -> tuple[float, float]:
        # The holder keeps its lock across the change: the fresh member is added back within
        # about a lease, while grants made before the removal are still held.
        lease_s = self.opts.lease_ms / 1000
        return min(0.5, lease_s / 2), max(1.0, lease_s)

    def targets(self, rng: random.Random, view: ScheduleView) -> Any:
        if rng.random() < 0.5:
            return {"node": LEADER}
        return {"node": rng.choice(list(view.servers))}

    def recorded(self, value: Any, started: Any) -> tuple[str, Any] | None:
        """A start aimed at the leader is replayed at the leader of that moment."""
        if isinstance(value, dict) and value.get("node") == LEADER:
            return PRIMARY, value
        return None
