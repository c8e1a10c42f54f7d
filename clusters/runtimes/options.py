"""The runtimes' own options (`--runtime-opt KEY=VALUE`, a RunConfig's `runtime_options`), one
pydantic model per runtime: the keyword arguments its class is built with. Kept apart from the
runtimes themselves so that validating and listing them (`fencecheck run --help`) imports no
Docker or SSH library."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


def check_subnet(v: str | None) -> str | None:
    if v is None:
        return v
    try:
        net = ipaddress.ip_network(v)
    except ValueError as e:
        raise ValueError(f"not an address range ({e})") from None
    if net.version != 4 or net.num_addresses < 8:
        raise ValueError("want an IPv4 range of at least 8 addresses, e.g. 10.77.0.0/24")
    return v


class NetnsOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    subnet: str | None = Field(
        default=None,
        description="the nodes' address range (default "
        "10.77.0.0/24, private to the run's switch namespace)",
    )

    @field_validator("subnet")
    @classmethod
    def _subnet(cls, v: str | None) -> str | None:
        return check_subnet(v)


class DockerOptions(NetnsOptions):
    subnet: str | None = Field(
        default=None,
        description="the Docker network's range (default: a free "
        "/24 of 10.96.0.0/12, taken under a machine-wide lock)",
    )


class SshOptions(BaseModel):
    """Existing machines: host keys are verified against known_hosts unless `accept_unknown`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hosts: tuple[str, ...] = Field(
        default=(),
        validate_default=True,
        description="the machines, server nodes first (h1,h2,...)",
    )
    user: str = Field(default="root", description="login user")
    key: Path | None = Field(default=None, description="private key file")
    port: int = Field(default=22, ge=1, le=65535, description="ssh port")
    sudo: bool = Field(default=False, description="run commands through sudo")
    accept_unknown: bool = Field(default=False, description="accept unknown host keys (insecure)")
    known_hosts: Path | None = Field(default=None, description="known_hosts file to verify against")

    @field_validator("hosts", mode="before")
    @classmethod
    def _hosts(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [h.strip() for h in v.split(",") if h.strip()]
        if not v:
            raise ValueError("--runtime ssh needs hosts (--runtime-opt hosts=h1,h2,... or --hosts)")
        return v

    def warnings(self) -> list[str]:
        if self.accept_unknown:
            return [
                "--runtime-opt accept_unknown (--ssh-accept-unknown): host keys are NOT "
                "verified; anyone on the path can impersonate the nodes"
            ]
        return []
