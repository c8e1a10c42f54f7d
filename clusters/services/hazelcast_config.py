"""The member configuration of `HazelcastService` (clusters/services/hazelcast.py): one
`hazelcast.yaml` per member, written as JSON (a subset of YAML, which Hazelcast's YAML loader
reads), and the timings a run's lease sets.

What is tuned, and why (every other setting is Hazelcast's default):
- TCP/IP join on the nodes' addresses only (no multicast, no auto-detection, no outbound calls:
  `phone.home` off), bound to the node's address (`bind_address`: the system property
  `hazelcast.local.localAddress`, since interface matching wants the address on an interface,
  which a loopback 127.x.y.z is not), no wait before joining.
- CP Subsystem: `cp-member-count` 3 (or 0: "unsafe mode", the same API on the partitioned AP
  structures), group size 3; the session TTL is the run's lease in whole seconds, rounded up (a
  FencedLock is held while its CP session lives: a holder that stops heartbeating loses it a TTL
  after its last heartbeat or lock call), the heartbeat 1 s. Raft's leader heartbeat 500 ms
  (default 5 s) and 3 missed ones (default 5) declare a leader dead, so a paused or cut-off
  leader is replaced in about 1.5 s rather than 25 s.
- Member failure detection: heartbeats every 1 s, a member silent for 3 s leaves the cluster
  view (default 60 s); a member that lost its master claims mastership within a few seconds
  (connections to members time out after 2 s, not 10; the claim after 3 s, not 120), so a
  member cut off forms a cluster of its own while the partition lasts, as it would in
  production given a longer one; split clusters look for each other every 2 s (default 300 s)
  to merge after a partition heals.
- The REST endpoints of the health check and the CP Subsystem: readiness and CP membership
  (promoting a restarted member) over plain HTTP on the member port.
- A SIGTERM terminates at once (no graceful migration on teardown).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

SESSION_HEARTBEAT_S = 1


def session_ttl_s(lease_ms: int) -> int:
    """The CP session TTL for a run's lease: whole seconds, rounded up, so a lock is never
    released sooner than the worker's lease says it may be."""
    return max(1, math.ceil(lease_ms / 1000))


def member_config(
    *,
    cluster: str,
    address: str,
    port: int,
    members: Sequence[str],
    cp_members: int,
    lease_ms: int,
) -> dict[str, Any]:
    """The configuration of the member at `address` (`members`: every member's address)."""
    cp: dict[str, Any] = {
        "session-time-to-live-seconds": session_ttl_s(lease_ms),
        "session-heartbeat-interval-seconds": SESSION_HEARTBEAT_S,
        "raft-algorithm": {
            "leader-election-timeout-in-millis": 1000,
            "leader-heartbeat-period-in-millis": 500,
            "max-missed-leader-heartbeat-count": 3,
        },
    }
    if cp_members:
        cp.update({"cp-member-count": cp_members, "group-size": min(cp_members, 7)})
    rest_groups = ("HEALTH_CHECK", "CLUSTER_READ", "CP")
    return {"hazelcast": {
        "cluster-name": cluster,
        "network": {
            "public-address": f"{address}:{port}",
            "port": {"port": port, "auto-increment": False},
            "join": {
                "auto-detection": {"enabled": False},
                "multicast": {"enabled": False},
                "tcp-ip": {"enabled": True, "connection-timeout-seconds": 1,
                           "member-list": [f"{m}:{port}" for m in members]},
            },
            "rest-api": {"enabled": True,
                         "endpoint-groups": {g: {"enabled": True} for g in rest_groups}},
        },
        "cp-subsystem": cp,
        "properties": {
            "hazelcast.phone.home.enabled": False,
            "hazelcast.socket.bind.any": False,
            "hazelcast.wait.seconds.before.join": 0,
            "hazelcast.max.wait.seconds.before.join": 0,
            "hazelcast.heartbeat.interval.seconds": 1,
            "hazelcast.max.no.heartbeat.seconds": 3,
            "hazelcast.socket.connect.timeout.seconds": 2,
            "hazelcast.mastership.claim.timeout.seconds": 3,
            "hazelcast.merge.first.run.delay.seconds": 2,
            "hazelcast.merge.next.run.delay.seconds": 2,
            "hazelcast.operation.call.timeout.millis": 5000,
            "hazelcast.shutdownhook.policy": "TERMINATE",
            "hazelcast.graceful.shutdown.max.wait": 1,
            "hazelcast.health.monitoring.level": "OFF",
            "hazelcast.logging.type": "jdk",
        },
    }}


def render(config: dict[str, Any]) -> str:
    """The file's text: JSON, which is YAML."""
    return json.dumps(config, indent=2) + "\n"


def bind_address(address: str) -> str:
    """The JVM flag that binds the member to `address`."""
    return f"-Dhazelcast.local.localAddress={address}"
