"""The lose-unsynced nemesis and the mounts it acts on: `UnsyncedMounts` puts each server node's
data directory on a lose-unsynced file system of its own (clusters/faults/unsynced_fs.py, driven
through unsynced_ctl.py) and takes them down again; `LoseUnsyncedNemesis` is a power loss of some
nodes: `start-lose-unsynced` SIGKILLs their servers and drops every byte and name change they had
not synced, `stop-lose-unsynced` restarts them on what is left.

Checkpoints: once the servers are up (`checkpoint`, called when the fault is bound) and after
each restart, everything written so far is made durable, as if the machine had run a while
before the fault. Without it a server that never fsyncs its data directory's own entries
(redis 7.0 creating `appendonlydir`) would lose all its files, which is true of a strict POSIX
disk but not what the fault is after: what a server acknowledged and had not yet synced.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
from pathlib import Path
from typing import Any

from fencecheck.clusters.base import ClusterError, Killable, NemesisOp
from fencecheck.clusters.cleaner import Ledger
from fencecheck.clusters.faults import unsynced_ctl as ctl

log = logging.getLogger(__name__)

# What a `lose` reply says that the history keeps (the rest is bookkeeping).
LOSE_FIELDS = ("bytes_dropped", "files_restored", "names_removed", "names_restored",
               "unrestorable")


class UnsyncedMounts:
    """One lose-unsynced file system per node, under the run directory (unsynced_ctl's naming
    rule). Each mount is recorded in the ledger before it is made and its process after it
    starts; `unmount_all` is idempotent."""

    def __init__(self, run_dir: Path, run_id: str, ledger: Ledger | None,
                 names: str = "posix") -> None:
        self.run_dir = run_dir
        self.run_id = run_id
        self.ledger = ledger
        self.names = names
        self.layouts: dict[str, ctl.Layout] = {}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def mount(self, node: str) -> Path:
        """Mount node's file system; return the directory its server keeps its data in."""
        lay = ctl.Layout.of(self.run_dir, self.run_id, node)
        self.layouts[node] = lay
        lay.root.mkdir(parents=True, exist_ok=True)
        if self.ledger is not None:
            self.ledger.record(ctl.MOUNT_KIND, lay.fsname, node=node,
                               mountpoint=str(lay.mountpoint.resolve()))
        proc = ctl.start(lay.mountpoint, lay.backing, lay.control, lay.fsname,
                         log_path=lay.root / "fs.log", names=self.names, timeout_s=60,
                         env=self.ledger.env() if self.ledger is not None else None)
        self.procs[node] = proc
        if self.ledger is not None:
            self.ledger.record_process(node, "unsynced-fs", proc.pid)
        log.info("%s: data on lose-unsynced fs %s (names %s)", node, lay.mountpoint, self.names)
        return lay.mountpoint

    def control(self, node: str) -> Path:
        try:
            return self.layouts[node].control
        except KeyError:
            raise ClusterError(f"lose-unsynced: {node} has no unsynced file system") from None

    def unmount_all(self) -> None:
        """Stop every file system (it unmounts itself; a lazy unmount if it cannot). Errors are
        gathered and raised together once all were tried."""
        errors = []
        for node, proc in list(self.procs.items()):
            try:
                ctl.stop(proc, self.layouts[node].mountpoint)
            except Exception as e:
                errors.append(f"{node}: {e}")
            else:
                del self.procs[node]
        if errors:
            raise ClusterError("lose-unsynced unmount: " + "; ".join(errors))


class LoseUnsyncedNemesis:
    """`start-lose-unsynced` {"nodes": [...]}: kill those nodes' servers, then drop what they had
    not synced; `stop-lose-unsynced`: restart them (and take a checkpoint)."""

    name = "lose-unsynced"

    def __init__(self, service: Killable, mounts: UnsyncedMounts,
                 name: str = "lose-unsynced") -> None:
        self.name = name  # its ops are start-<name> and stop-<name>
        self.service = service
        self.mounts = mounts
        self.down: list[str] = []

    def checkpoint(self, nodes: list[str]) -> dict[str, Any]:
        """Make everything the nodes' servers wrote so far durable (the module docstring)."""
        return {n: ctl.sync(self.mounts.control(n)) for n in nodes}

    def invoke(self, op: NemesisOp) -> Any:
        if op.f == f"start-{self.name}":
            nodes = list(op.value["nodes"])
            for n in nodes:  # all down before any loses: one power cut, not a rolling one
                self.down.append(n)
                self.service.kill(n)
            lost = {}
            for n in nodes:
                reply = ctl.lose(self.mounts.control(n))
                lost[n] = {k: reply.get(k) for k in LOSE_FIELDS}
            log.info("lose-unsynced: %s", lost)
            return {"killed": nodes, "lost": lost}
        if op.f == f"stop-{self.name}":
            nodes = list(self.down)
            self.heal()
            return {"restarted": nodes}
        raise ClusterError(f"{self.name} nemesis: unknown op {op.f!r}")

    def heal(self) -> None:
        """Restart every node still down. Idempotent; errors gathered and raised at the end."""
        errors: list[str] = []
        while self.down:
            n = self.down[0]
            try:
                self.service.restart(n)
                with contextlib.suppress(ctl.UnsyncedFsError):  # a checkpoint only keeps more
                    ctl.sync(self.mounts.control(n))
            except Exception as e:
                errors.append(f"{n}: {e}")
            self.down.pop(0)
        if errors:
            raise ClusterError("lose-unsynced: could not restart: " + "; ".join(errors))
