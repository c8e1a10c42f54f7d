"""The shipped Go and JVM lock libraries of issue 19, each a `StdioClient` running its built
program (workloads/clients/build.py; built by scripts/build-clients.sh):

- `go-redsync`: github.com/go-redsync/redsync/v4 (Redlock in Go) over go-redis v9; no token.
- `etcd-go-election`: etcd's Go client/v3/concurrency Election, for the `leader` workload; the
  term (token) is the leader key's create revision.
- `redisson` / `redisson-fenced`: Redisson's RLock (no token) and RFencedLock (its fencing token),
  both renewed by Redisson's lock watchdog, on `redis`, and on `redis-sentinel` through the
  sentinels (the program's Sentinel mode, chosen by the `service_name` option that backend
  gives its clients).
- `shedlock`: ShedLock's Redis provider (Spring Data Redis + Jedis), for the `cron` workload: the
  lease is lockAtMostFor, the client option `lock_at_least_ms` its lockAtLeastFor; no renewal,
  no token.
"""

from __future__ import annotations

from fencecheck.workloads.third_party import _Shipped


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
