"""The `lose-unsynced` fault: a power loss of one server node or a majority. Each server's data
directory sits on a lose-unsynced file system (mounted before the service starts, unmounted
after it stops, on every exit path); a start SIGKILLs the servers and drops every byte and name
change they had not fsynced, a stop restarts them on what is left (clusters/faults/unsynced.py).

A service offers it by declaring the `lose-unsynced` capability (descriptors/base.py: UNSYNCED)
and implementing DataDirs and Killable. Local runtimes only: the file systems are mounted on the
controller's host, where netns nodes run."""

from __future__ import annotations

import random
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any

from fencecheck.clusters.base import ClusterError, DataDirs, Killable, LockService
from fencecheck.clusters.faults.unsynced import LoseUnsyncedNemesis, UnsyncedMounts
from fencecheck.descriptors.base import KILL, UNSYNCED, FaultDescriptor, Need
from fencecheck.nemesis.faults.base import FaultContext, FaultOptions, ScheduleView
from fencecheck.nemesis.faults.nemesis_fault import NemesisFault

DESCRIPTOR = FaultDescriptor(
    name="lose-unsynced",
    factory="fencecheck.nemesis.faults.lose_unsynced:LoseUnsyncedFault",
    summary="power loss: SIGKILL servers, drop what they had not fsynced, restart them",
    requires=frozenset({UNSYNCED, KILL}),
    runtimes=frozenset({"netns"}),
    # /dev/fuse comes with the kernel, not a package: the file system says so if it is missing
    needs=(Need("FUSE (lose-unsynced file system)", binary="fusermount3", package="fuse3"),
           # the file system's process imports it (not the controller): checked before a run
           Need("pyfuse3 (lose-unsynced file system)", dist="pyfuse3")),
)


class LoseUnsyncedFault(NemesisFault):
    name = "lose-unsynced"

    def __init__(self, opts: FaultOptions) -> None:
        self.opts = opts
        self.mounts: UnsyncedMounts | None = None

    def place(self, service: LockService, nodes: Sequence[str], stack: ExitStack,
              ledger: Any) -> None:
        if not isinstance(service, DataDirs):
            raise ClusterError(f"lose-unsynced: {self.opts.backend} declares {UNSYNCED} but "
                               "cannot place its data directories")
        mounts = UnsyncedMounts(self.opts.run_dir, self.opts.run_id, ledger)
        stack.callback(mounts.unmount_all)
        self.mounts = mounts
        for node in nodes:
            service.place_data(node, mounts.mount(node))

    def bind(self, ctx: FaultContext) -> None:
        if self.mounts is None:
            raise ClusterError("lose-unsynced: the servers' data is not on its file system")
        if not isinstance(ctx.service, Killable):
            raise ClusterError(f"lose-unsynced: {self.opts.backend} declares {UNSYNCED} but "
                               "cannot be killed")
        nemesis = LoseUnsyncedNemesis(ctx.service, self.mounts)
        nemesis.checkpoint(list(ctx.servers))  # the servers are up: their startup is durable
        self.nemesis = nemesis

    def hold_range_s(self) -> tuple[float, float]:
        # Back inside the lease, as the kill fault: a server that forgot a grant serves again
        # while that grant is still surely held, so granting it anew is a double grant.
        lease_s = self.opts.lease_ms / 1000
        return min(0.2, lease_s / 4), max(0.3, lease_s / 2)

    def targets(self, rng: random.Random, view: ScheduleView) -> Any:
        servers = list(view.servers)
        # One node, or a majority (what it takes for Redlock's quorum to forget a grant).
        count = 1 if len(servers) < 3 or rng.random() < 0.5 else len(servers) // 2 + 1
        return {"nodes": sorted(rng.sample(servers, count))}
