"""The `lose-unsynced` fault: a power loss of one server node or a majority. Each server's data
directory sits on a lose-unsynced file system (mounted before the service starts, unmounted
after it stops, on every exit path); a start SIGKILLs the servers and drops every byte and name
change they had not fsynced, a stop restarts them on what is left (clusters/faults/unsynced.py).

A service offers it by declaring the `lose-unsynced` capability (descriptors/base.py: UNSYNCED)
and implementing DataDirs and Killable. Local runtimes only: the file systems are mounted on the
controller's host, where netns nodes run."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any

from fencecheck.clusters.base import ClusterError, DataDirs, Killable, LockService
from fencecheck.clusters.faults.unsynced import LoseUnsyncedNemesis, UnsyncedMounts
from fencecheck.descriptors.base import KILL, UNSYNCED, FaultDescriptor, Need
from fencecheck.nemesis.faults.base import FaultContext, FaultOptions
from fencecheck.nemesis.faults.kill import KillFault

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


class LoseUnsyncedFault(KillFault):
    """The kill fault's timing and targets (back inside the lease: a server that forgot a grant
    serves again while that grant is still surely held, so granting it anew is a double grant;
    one node or the majority Redlock's quorum needs to forget it), on the file system."""

    name = "lose-unsynced"
    names = "posix"  # when a name change is durable (clusters/faults/unsynced_fs.py --names)

    def __init__(self, opts: FaultOptions) -> None:
        self.opts = opts
        self.mounts: UnsyncedMounts | None = None

    def place(self, service: LockService, nodes: Sequence[str], stack: ExitStack,
              ledger: Any) -> None:
        if not isinstance(service, DataDirs):
            raise ClusterError(f"lose-unsynced: {self.opts.backend} declares {UNSYNCED} but "
                               "cannot place its data directories")
        mounts = UnsyncedMounts(self.opts.run_dir, self.opts.run_id, ledger, self.names)
        stack.callback(mounts.unmount_all)
        self.mounts = mounts
        for node in nodes:
            service.place_data(node, mounts.mount(node))

    def _nemesis(self, service: LockService) -> LoseUnsyncedNemesis:
        if self.mounts is None:
            raise ClusterError("lose-unsynced: the servers' data is not on its file system")
        if not isinstance(service, Killable):
            raise ClusterError(f"lose-unsynced: {self.opts.backend} declares {UNSYNCED} but "
                               "cannot be killed")
        return LoseUnsyncedNemesis(service, self.mounts, self.name)

    def service_up(self, service: LockService, servers: Sequence[str]) -> None:
        # The servers are up and no worker has started: their startup is durable, and nothing
        # a worker made them write is. (Taken at bind, after the workers were spawned, the
        # checkpoint raced their first writes, which workers forked by the run's zygote won:
        # a ZooKeeper without forceSync kept its first sessions through the first loss.)
        self._nemesis(service).checkpoint(list(servers))

    def bind(self, ctx: FaultContext) -> None:
        self.nemesis = self._nemesis(ctx.service)

