"""`DemoRedisService`: the lock service of the plugin's own backend, `demo-redis`: one
redis-server on the port its option names (a backend's options model: `DemoRedisOptions`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fencecheck.clusters.services.redis import RedisService


class DemoRedisOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    port: int = Field(
        default=6390, ge=1024, le=65535, description="the port redis-server listens on"
    )


class DemoRedisService(RedisService):
    name = "demo-redis"

    def __init__(
        self,
        port: int = 6390,
        env_for: Callable[[str], Mapping[str, str]] | None = None,
        *,
        ledger: Any = None,
    ) -> None:
        super().__init__(port, "off", env_for, ledger=ledger)
