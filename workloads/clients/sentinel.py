"""`SentinelSetnxClient` ("redis-sentinel"): the redis-setnx lock (SET NX PX plus an INCR token
in one Lua script, from workloads/clients/redis.py) on whichever server the Redis Sentinels
currently name as primary.

Each new connection asks the sentinels for the primary (redis-py's `Sentinel.master_for`); a
pooled connection stays on its server until it fails, as in any real deployment, which is part
of why a failover can grant one lock twice. Nothing retries: not the sentinel queries, not the
commands. Beyond redis-setnx's error mapping: no sentinel names a primary -> DefiniteFailure
("no-primary"); a reply of READONLY from a primary demoted under us -> DefiniteFailure
("readonly").

Options: `endpoints` (the sentinels), `op_timeout_s`, `service_name` (default "fc-primary",
the name clusters/services/sentinel.py monitors), and redis-setnx's `poll_ms`, `key_prefix`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.sentinel import MasterNotFoundError, Sentinel

from fencecheck.workloads import options as opts
from fencecheck.workloads.base import DefiniteFailure, Indeterminate
from fencecheck.workloads.clients.redis import RedisConn, SetnxClient, connection_kwargs

log = logging.getLogger(__name__)

DEFAULT_SERVICE_NAME = "fc-primary"  # = clusters.services.sentinel.MASTER_NAME
# What redis-py's SentinelManagedConnection raises instead of the server's READONLY reply.
_DEMOTED = "previous master is now a slave"


class SentinelConn(RedisConn):
    """redis-setnx's connection, on the primary the sentinels name."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        eps = opts.endpoints(options)
        kw = connection_kwargs(opts.op_timeout_s(options))
        self.service_name = str(options.get("service_name", DEFAULT_SERVICE_NAME))
        # redis.sentinel has no type annotations.
        self.sentinel = Sentinel(eps, sentinel_kwargs=kw, **kw)  # type: ignore[no-untyped-call]
        client = self.sentinel.master_for(self.service_name, **kw)  # type: ignore[no-untyped-call]
        super().__init__(client, *eps[0])

    def connect_failure(self, e: RedisError) -> DefiniteFailure:
        if isinstance(e, MasterNotFoundError):
            return DefiniteFailure("no-primary", str(e))
        return super().connect_failure(e)

    def request_failure(self, e: Exception) -> DefiniteFailure | Indeterminate | None:
        if isinstance(e, RedisConnectionError) and _DEMOTED in str(e):
            return DefiniteFailure("readonly", str(e))  # the server refused: nothing was written
        return super().request_failure(e)

    def primary_address(self) -> tuple[str, int]:
        """Where the sentinels say the primary is now (asks them; for tests and logs)."""
        host, port = self.sentinel.discover_master(self.service_name)  # type: ignore[no-untyped-call]
        return str(host), int(port)

    def close(self) -> None:
        self.client.close()
        for s in self.sentinel.sentinels:
            s.close()


class SentinelSetnxClient(SetnxClient):
    """redis-setnx through Redis Sentinel."""

    name = "redis-sentinel"

    def __init__(self, options: Mapping[str, Any]) -> None:
        self._sentinel = SentinelConn(options)
        super().__init__(options, conn=self._sentinel)

    def primary_address(self) -> tuple[str, int]:
        return self._sentinel.primary_address()
