"""The membership change nemesis: `start-membership` removes one node's member from the
service's configuration (and stops its server), `stop-membership` adds a fresh member on that
node (a new id, an empty data directory) and waits until it serves. `heal` gives every node a
serving member again, so the service ends at its original size and on its original nodes.

The service does the work (clusters/base.py `Reconfigurable`: etcd `member remove/add`,
ZooKeeper's `reconfig`); this keeps the bookkeeping that makes the heal complete: a node is
recorded as removed before its removal starts, so a removal that failed halfway is still
undone.
"""

from __future__ import annotations

import logging
from typing import Any

from fencecheck.clusters.base import ClusterError, NemesisOp, Reconfigurable

log = logging.getLogger(__name__)

LEADER = "leader"  # a start's "node" that means whichever node leads when it starts


class MembershipNemesis:
    """`start-membership` {"node": NODE | "leader"}; `stop-membership` adds fresh members on
    every node removed since the last stop."""

    name = "membership"

    def __init__(self, service: Reconfigurable, nodes: list[str]) -> None:
        self.service = service
        self.nodes = list(nodes)
        self.removed: list[str] = []
        self.changed = False  # a removal was tried: the heal has something to check

    def invoke(self, op: NemesisOp) -> Any:
        if op.f == "start-membership":
            return self._remove(str(op.value["node"]))
        if op.f == "stop-membership":
            return self._add_back()
        raise ClusterError(f"membership nemesis: unknown op {op.f!r}")

    def _remove(self, asked: str) -> dict[str, Any]:
        if self.removed:  # one member out at a time: a second could take the quorum with it
            return {"skipped": f"{', '.join(self.removed)} not added back yet"}
        leader = self.service.leader()
        node = leader if asked == LEADER else asked
        if node is None:
            return {"skipped": "no leader to remove"}
        if node not in self.nodes:
            raise ClusterError(f"membership: unknown node {node!r}")
        self.removed.append(node)  # recorded first: heal must add back even a half-done removal
        self.changed = True
        done = self.service.remove_member(node)
        log.info("membership: removed %s (%s)", node, done)
        return {"removed": node, "was_leader": node == leader, **done}

    def _add_back(self) -> dict[str, Any]:
        added = {}
        while self.removed:
            node = self.removed[0]
            added[node] = self.service.add_member(node)
            self.removed.pop(0)
        log.info("membership: added %s", added)
        return {"added": added}

    def heal(self) -> None:
        """Add a fresh member on every node removed and not yet added back, and on any node
        the configuration lacks, once a removal was tried. Idempotent; errors gathered and
        raised at the end."""
        if not self.changed:
            return
        errors: list[str] = []
        try:
            present = set(self.service.members())
        except Exception as e:
            present, errors = set(), [f"members: {e}"]
        back = []
        for node in self.nodes:
            if node in self.removed or node not in present:
                try:
                    self.service.add_member(node)
                    back.append(node)
                except Exception as e:
                    errors.append(f"{node}: {e}")
        self.removed.clear()
        if errors:
            raise ClusterError("membership: could not restore: " + "; ".join(errors))
        log.info("membership: healed (fresh members on %s)", ", ".join(back) or "no node")
