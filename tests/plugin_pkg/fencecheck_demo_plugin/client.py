"""`demo-setnx`: SET NX PX with an owner value and no fencing token (for the redis backend)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from typing import Any

import redis
from pydantic import BaseModel, ConfigDict, Field

from fencecheck.descriptors.base import ClientDescriptor
from fencecheck.descriptors.catalog import ClientPlugin
from fencecheck.workloads.base import DefiniteFailure, Grant, Indeterminate

RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end"
RENEW = ("if redis.call('get', KEYS[1]) == ARGV[1] then "
         "return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0")


class DemoClientOptions(BaseModel):
    """What `--client-opt` may set for the demo client (a client's options model)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key_prefix: str = Field(default="demo:", description="the lock keys' prefix")


class DemoSetnxClient:
    name = "demo-setnx"

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.prefix = str(options.get("key_prefix", "demo:"))
        host, _, port = str(options["endpoints"][0]).rpartition(":")
        timeout = float(options.get("op_timeout_s", 1.0))
        self.r = redis.Redis(host=host, port=int(port), socket_timeout=timeout,
                             socket_connect_timeout=timeout)

    def _call(self, fn: Any) -> Any:
        try:
            return fn()
        except redis.RedisError as e:  # the request may have landed
            raise Indeterminate("redis", str(e)) from None

    def acquire(self, lock: str, lease_ms: int, timeout_s: float) -> Grant:
        owner = secrets.token_hex(8)
        deadline = time.monotonic() + timeout_s
        key = f"{self.prefix}{lock}"
        while not self._call(lambda: self.r.set(key, owner, nx=True, px=lease_ms)):
            if time.monotonic() >= deadline:
                raise DefiniteFailure("timeout", lock)
            time.sleep(0.005)
        return Grant(lock=lock, token=None, lease_ms=lease_ms, handle=owner)

    def renew(self, grant: Grant, lease_ms: int) -> Grant:
        if not self._call(lambda: self.r.eval(RENEW, 1, f"{self.prefix}{grant.lock}", grant.handle,
                                              lease_ms)):
            raise DefiniteFailure("lost", grant.lock)
        return grant

    def release(self, grant: Grant) -> None:
        self._call(lambda: self.r.eval(RELEASE, 1, f"{self.prefix}{grant.lock}", grant.handle))

    def close(self) -> None:
        self.r.close()


PLUGIN = ClientPlugin(
    client=ClientDescriptor("demo-setnx", "fencecheck_demo_plugin.client:DemoSetnxClient",
                            token=None),
    backends=("redis",),
)
