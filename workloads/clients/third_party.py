"""The shipped third-party lock libraries: `ShippedClient`, a `StdioClient` running the built
program its descriptor declares (descriptors/, `ClientDescriptor.program`; built by
`fencecheck build` through workloads/clients/build.py). `check_ready` refuses a client
that cannot start, before a run creates anything. The programs:

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
- `hazelcast-java`: Hazelcast's Java client (5.4.0), the CP Subsystem's `FencedLock` (or the same
  API in unsafe mode) on the `hazelcast` backends; token = the fence; renew = a re-entry and an
  unlock (both refresh the CP session).
- `client-go`: Kubernetes' client-go leader election (tools/leaderelection, a LeaseLock) on the
  `kubernetes` backend; token = the Lease's resourceVersion of the write that won; renewal by
  the elector itself (a renew answers once it has renewed), release by ReleaseOnCancel;
  `--client-opt version=v0.34.0` runs it built against another client-go release (its
  descriptor's `versions`; `fencecheck build client-go@v0.34.0`).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from typing import Any

from fencecheck.workloads.base import WorkloadError
from fencecheck.workloads.clients.build import BUILDS, command, version_build
from fencecheck.workloads.clients.stdio import StdioClient, parse_cmd


class ShippedClient(StdioClient):
    """A shipped program of the stdio protocol, run from its build: which one is the `program`
    option, the client's name (the worker's client table sets it for every client whose
    descriptor declares a program)."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        program = options.get("program")
        if not isinstance(program, str) or not program:
            raise WorkloadError("a shipped client needs its program's name (option 'program')")
        self.name = program
        super().__init__({**options, "cmd": command(version_build(program,
                                                                  options.get("version")))})


def check_ready(client: str, options: Mapping[str, Any]) -> None:
    """WorkloadError (one line, with the fix) if `client` is a shipped client that is not built
    (in the version its `version` option asks for), or the stdio client with a command that is
    not there."""
    if client in BUILDS:
        argv = command(version_build(client, options.get("version")))
    elif client == "stdio":
        if not options.get("cmd"):
            raise WorkloadError("the stdio client needs a program: --client-cmd \"CMD ARGS\"")
        argv = parse_cmd(options["cmd"])
    else:
        return
    if shutil.which(argv[0]) is None:
        why = (f"; client {client} runs with it (`fencecheck doctor` names its package)"
               if client in BUILDS else "")
        raise WorkloadError(f"client command {argv[0]!r} not found (on PATH or as a path){why}")
