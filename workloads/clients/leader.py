"""The `leader` workload: election clients (LockClients whose grant is a term of office) and
`LeaderWorker`, the loop of a candidate that campaigns, leads for a seeded tenure, and resigns.

Clients (registered in workloads/registry.py):
- `EtcdElectionClient` ("etcd-election"): etcd's election service through its JSON gateway.
  campaign = `/v3/lease/grant` + `/v3/election/campaign` (blocks until elected; the lease is kept
  alive meanwhile, as for the lock API, see workloads/clients/etcd.py); the term is the leader
  key's create revision (the `rev` etcd answers). renew = `/v3/lease/keepalive`, then
  `/v3/election/proclaim`, which etcd refuses ("not leader", a definite refusal) once the leader
  key is gone. resign = `/v3/election/resign`, then `/v3/lease/revoke`.
- `ZkElectionClient` ("zookeeper-election"): kazoo's `Election`, driven through the `Lock` recipe
  it is built on (`Election.run` blocks for the whole tenure, which leaves no room for the
  history's operations); the term is the leader node's czxid.
- `RedisLeaseClient` ("redis-lease"): a Redis lease, the setnx client (SET NX PX, term from INCR
  in the same script) under its own key prefix.

History (so the lock checks apply unchanged, DESIGN.md): a campaign is an `acquire` of lock
"leader" whose ok carries the term as `token`; keeping office is `renew`; resigning is
`release`; the leader's actions are `read`s and `write`s (read + 1) of the counter key "leader",
each carrying the term as `token`. Two leaders surely in office at once is then a `double-grant`,
and an accepted action of a deposed leader a `stale-write-accepted`. `locks` and
`writes_per_section` of the config are not used (one election; a tenure ends by time).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.recipe.election import Election
from kazoo.recipe.lock import Lock

from fencecheck.workloads.base import DefiniteFailure, Grant, LockClient, Resource
from fencecheck.workloads.clients.etcd import (
    EtcdClient,
    EtcdHandle,
    GrpcError,
    Refused,
    Uncertain,
    b64,
    etcd_handle,
    gateway_failure,
    unb64,
)
from fencecheck.workloads.clients.redis import SetnxClient
from fencecheck.workloads.clients.zk import ZkClient
from fencecheck.workloads.eventlog import EventLog
from fencecheck.workloads.loops.worker import Worker, WorkerConfig

log = logging.getLogger(__name__)

LEADER_LOCK = "leader"  # the lock (election) name, and the key of the leader's counter
ELECTION_NAMESPACE = "fc/election/"
ZK_ELECTION_ROOT = "/fc/elections/"
# A tenure lasts this many leases (uniform, seeded): long enough for many actions and renewals.
TENURE_LEASES = (1.5, 4.0)


def election_name(lock: str) -> str:
    """The etcd election name; candidates' keys are `<name>/<lease-hex>`."""
    return ELECTION_NAMESPACE + lock


class EtcdElectionClient(EtcdClient):
    """LockClient over etcd's election API. Options as `EtcdClient`'s."""

    name = "etcd-election"

    verbs = ("campaigning", "campaign", "elected")

    def _prefix(self, lock: str) -> str:
        """The candidates' keys: the oldest is the leader (the inherited `_owner`)."""
        return election_name(lock) + "/"

    def _wait_granted(self, lock: str, lease_id: str, timeout_s: float) -> str:
        body = {"name": b64(election_name(lock)), "lease": lease_id, "value": b64(lease_id)}
        resp = self.gw.post("/v3/election/campaign", body, timeout_s=timeout_s)
        return unb64(resp["leader"]["key"]).decode()

    def _leader(self, grant: Grant, handle: EtcdHandle) -> dict[str, Any]:
        return {"name": b64(election_name(grant.lock)), "key": b64(handle.key),
                "rev": str(grant.token), "lease": handle.lease_id}

    def renew(self, grant: Grant, lease_ms: int) -> Grant:
        renewed = super().renew(grant, lease_ms)  # keepalive: the lease, hence the key, lives
        handle = etcd_handle(grant)
        body = {"leader": self._leader(grant, handle), "value": b64(handle.lease_id)}
        try:
            self.gw.post("/v3/election/proclaim", body)
        except (Refused, Uncertain, GrpcError) as e:
            if isinstance(e, GrpcError) and "not leader" in e.message:
                raise DefiniteFailure("not-leader", str(e)) from None
            raise gateway_failure(e, "proclaim") from None
        return renewed

    def release(self, grant: Grant) -> None:
        handle = etcd_handle(grant)
        try:
            self.gw.post("/v3/election/resign", {"leader": self._leader(grant, handle)})
        except (Refused, Uncertain, GrpcError) as e:
            if not (isinstance(e, GrpcError) and e.definite):
                raise gateway_failure(e, "resign") from None
            log.debug("etcd-election: resign refused (%s); revoking the lease", e)
        super().release(grant)  # revoke: a 404 says the term had already ended


class ZkElectionClient(ZkClient):
    """LockClient over kazoo's Election (its Lock recipe). Options as `ZkClient`'s."""

    name = "zookeeper-election"

    verbs = ("campaigning", "campaign", "elected")

    def _path(self, lock: str) -> str:
        return ZK_ELECTION_ROOT + lock

    def _recipe(self, zk: KazooClient, path: str) -> Lock:
        return Election(zk, path).lock


class RedisLeaseClient(SetnxClient):
    """A Redis lease: the setnx client under the key prefix "fc:lease:" (option `key_prefix`)."""

    name = "redis-lease"

    def __init__(self, options: Mapping[str, Any]) -> None:
        super().__init__({"key_prefix": "fc:lease:", **options})


class LeaderWorker(Worker):
    """Campaign for "leader"; in office, act (read, think, write read+1 on key "leader", with
    the term as token) and keep the lease (renew at half a lease, whatever `renew` says) until a
    seeded tenure ends; then resign and idle. A refused or uncertain step ends the tenure as in
    the lock loop: refused -> resign; uncertain -> the process retires, the term is dropped."""

    def __init__(self, config: WorkerConfig, client: LockClient | None, resource: Resource,
                 events: EventLog, stop: Callable[[], bool] = lambda: False) -> None:
        super().__init__(dataclasses.replace(config, renew=True), client, resource, events,
                         stop)

    def final_keys(self) -> list[str]:
        return [LEADER_LOCK]

    def run(self) -> None:
        assert self.client is not None, "run needs a lock client"
        while not self.stop():
            grant = self._acquire(LEADER_LOCK)
            if grant is not None:
                grant = self._tenure(grant)
                if grant is not None:
                    self._release(grant)
            if self.stop():
                break
            self._sleep(self.config.idle_ms)

    def _tenure(self, grant: Grant) -> Grant | None:
        """Act until the tenure ends. Returns the grant to resign, or None to drop it."""
        lo, hi = TENURE_LEASES
        until = self.events.now() + int(self.rng.uniform(lo, hi) * self.config.lease_ms * 1e6)
        while self.events.now() < until:
            go, held = self._round(grant)
            if not go or held is None:
                return held
            grant = held
        return grant
