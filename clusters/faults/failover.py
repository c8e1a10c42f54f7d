"""The Sentinel failover fault mechanism: take the current primary away (isolate it from the
other service nodes, pause it, or kill it) so the sentinels promote a replica; give it back on
stop. The run-level plugin is fencecheck/nemesis/faults/failover.py."""

from __future__ import annotations

import logging
from typing import Any, Literal

from fencecheck.clusters.base import ClusterError, NemesisOp, Net, namespace_of
from fencecheck.clusters.cleaner import NETNS_NAME_RE
from fencecheck.clusters.services.sentinel import SentinelService

log = logging.getLogger(__name__)


def _netns_net(service: SentinelService) -> Net | None:
    """An IptablesNet over the service's nodes if they are netns nodes of one run, else None.
    Its chains live inside the run's namespaces and go away with them."""
    from fencecheck.clusters.faults.partition import IptablesNet  # only netns runs need iptables

    runs = set()
    for r in service._nodes.values():
        ns = namespace_of(r)
        m = NETNS_NAME_RE.match(ns) if ns is not None else None
        if m is None:
            return None
        runs.add(m.group(1))
    if len(runs) != 1:
        return None
    return IptablesNet(service._nodes, runs.pop(), service.ledger)


class FailoverNemesis:
    """Makes the sentinels fail over by taking the current primary away on `start-failover`
    and giving it back on `stop-failover`. Holds should outlast down-after plus the failover
    (a few seconds). Modes:

    - "isolate" (needs `net`): cut the primary's node off from the other service nodes, not
      from clients. Clients stay on the old primary and are granted locks there that the
      promoted replica never sees; after the heal the old primary is demoted and drops them,
      while their holders' leases still run. The classic Sentinel split brain.
    - "pause": SIGSTOP the primary's server, SIGCONT on stop; it comes back as a second
      master until the sentinels demote it (only clients still connected to it notice).
    - "kill": SIGKILL it; stop restarts it (empty, with persistence off).

    Without a mode: "isolate" when given a net or when the nodes are netns nodes (an
    IptablesNet over them is made here), else "pause". `heal` undoes whatever is still in
    effect; idempotent."""

    name = "failover"

    def __init__(
        self,
        service: SentinelService,
        mode: Literal["isolate", "pause", "kill"] | None = None,
        net: Net | None = None,
    ) -> None:
        if net is None and mode in (None, "isolate"):
            net = _netns_net(service)
        mode = mode or ("isolate" if net is not None else "pause")
        if mode not in ("isolate", "pause", "kill"):
            raise ClusterError(f"failover nemesis: bad mode {mode!r}")
        if mode == "isolate" and net is None:
            raise ClusterError("failover nemesis: mode isolate needs a net")
        self.service = service
        self.mode = mode
        self.net = net
        self._victim: str | None = None

    def invoke(self, op: NemesisOp) -> Any:
        if op.f == "start-failover":
            if self._victim is not None:
                return {"skipped": f"{self._victim} is still taken away ({self.mode})"}
            node = self.service.primary()
            self._victim = node  # recorded first: heal must undo even a half-done start
            value: dict[str, Any] = {"primary": node, "mode": self.mode}
            if self.mode == "isolate":
                assert self.net is not None
                grudge = self.service.isolation(node)
                self.net.drop(grudge)
                value["grudge"] = {n: sorted(g) for n, g in sorted(grudge.items())}
            elif self.mode == "pause":
                self.service.pause(node)
            else:
                self.service.kill(node)
            return value
        if op.f == "stop-failover":
            victim = self._victim
            self.heal()
            now: str | None
            try:
                now = self.service.primary()
            except ClusterError:
                now = None
            return {"node": victim, "primary": now}
        raise ClusterError(f"failover nemesis: unknown op {op.f!r}")

    def heal(self) -> None:
        node, self._victim = self._victim, None
        if node is None:
            return
        if self.mode == "isolate":
            assert self.net is not None
            self.net.heal()
        elif self.mode == "pause":
            self.service.resume(node)
        else:
            self.service.restart(node)
