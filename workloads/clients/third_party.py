"""The shipped third-party lock libraries, each a `StdioClient` running its built program
(workloads/clients/build.py; built by scripts/build-clients.sh). `check_ready` refuses a client
that cannot start, before a run creates anything.

- `node-redlock` (npm redlock + ioredis), `curator` (Apache Curator's InterProcessMutex; token =
  the lock node's czxid), `etcd-go` (etcd's client/v3/concurrency Mutex; token = the key's create
  revision).
- `go-redsync`: github.com/go-redsync/redsync/v4 (Redlock in Go) over go-redis v9; no token.
- `etcd-go-election`: etcd's Go concurrency Election, for the `leader` workload; the term
  (token) is the leader key's create revision.
- `redisson` / `redisson-fenced`: Redisson's RLock (no token) and RFencedLock (its fencing token),
  both renewed by Redisson's lock watchdog, on `redis`, and on `redis-sentinel` through the
  sentinels (the program's Sentinel mode, chosen by the `service_name` option that backend gives
  its clients).
- `shedlock`: ShedLock's Redis provider (Spring Data Redis + Jedis), for the `cron` workload: the
  lease is lockAtMostFor, the client option `lock_at_least_ms` its lockAtLeastFor; no renewal,
  no token.
- `shedlock-jdbc`: ShedLock's JDBC provider (JdbcTemplateLockProvider) on the PostgreSQL server of
  `postgres-advisory`, for the `cron` workload, as `shedlock`; the program creates the provider's
  table; `--client-opt use_db_time=true` takes the time from PostgreSQL (usingDbTime()).
- `client-go`: Kubernetes' client-go leader election (tools/leaderelection, a LeaseLock) on the
  `kubernetes` backend; token = the Lease's resourceVersion of the write that won; renewal by
  the elector itself (a renew answers once it has renewed), release by ReleaseOnCancel.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from typing import Any

from fencecheck.workloads.base import WorkloadError
from fencecheck.workloads.clients.build import BUILDS, command
from fencecheck.workloads.clients.stdio import StdioClient, parse_cmd


class _Shipped(StdioClient):
    build_name = ""

    def __init__(self, options: Mapping[str, Any]) -> None:
        super().__init__({**options, "cmd": command(self.build_name)})


class NodeRedlockClient(_Shipped):
    """npm `redlock` 4 over ioredis, one Redlock over every master; no token."""

    name = build_name = "node-redlock"


class CuratorClient(_Shipped):
    """Apache Curator's InterProcessMutex; token = the lock node's czxid."""

    name = build_name = "curator"


class EtcdGoClient(_Shipped):
    """etcd's Go concurrency.Mutex; token = the lock key's create revision."""

    name = build_name = "etcd-go"


class GoRedsyncClient(_Shipped):
    """go-redsync's Mutex over every master of `redlock`; no token."""

    name = build_name = "go-redsync"


class EtcdGoElectionClient(_Shipped):
    """etcd's Go concurrency.Election; token = the leader key's create revision."""

    name = build_name = "etcd-go-election"


class RedissonClient(_Shipped):
    """Redisson's RLock with its watchdog renewal; no token."""

    name = build_name = "redisson"


class RedissonFencedClient(_Shipped):
    """Redisson's RFencedLock with its watchdog renewal; token = its fencing token."""

    name = build_name = "redisson-fenced"


class ShedLockClient(_Shipped):
    """ShedLock's RedisLockProvider: lockAtMostFor = the lease; no renewal, no token."""

    name = build_name = "shedlock"


class ShedLockJdbcClient(_Shipped):
    """ShedLock's JdbcTemplateLockProvider on PostgreSQL: lockAtMostFor = the lease; client
    options `use_db_time` (its usingDbTime()) and `locked_by`; no renewal, no token."""

    name = build_name = "shedlock-jdbc"


class ClientGoClient(_Shipped):
    """client-go's LeaderElector over a LeaseLock; token = the Lease's resourceVersion."""

    name = build_name = "client-go"


def check_ready(client: str, options: Mapping[str, Any]) -> None:
    """WorkloadError (one line, with the fix) if `client` is a shipped client that is not built,
    or the stdio client with a command that is not there."""
    if client in BUILDS:
        argv = command(client)
    elif client == "stdio":
        if not options.get("cmd"):
            raise WorkloadError("the stdio client needs a program: --client-cmd \"CMD ARGS\"")
        argv = parse_cmd(options["cmd"])
    else:
        return
    if shutil.which(argv[0]) is None:
        raise WorkloadError(f"client command {argv[0]!r} not found (on PATH or as a path)")
