"""The configuration of one run (`RunConfig`), validated with pydantic, and its defaults.

Every option of `fencecheck run` lands here; a bad value becomes `ConfigError` naming the field,
which the CLI prints as one line with exit code 3.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from fencecheck.descriptors import catalog
from fencecheck.nemesis.faults import registry as fault_registry
from fencecheck.run.errors import ConfigError as ConfigError  # re-exported

PauseTarget = Literal["holder", "random", "server"]


def _choice(kind: str, name: str, known: list[str]) -> str:
    if name not in known:
        raise ValueError(f"unknown {kind} {name!r} (choose one of {', '.join(known)})")
    return name




class RunConfig(BaseModel):
    """One run of `fencecheck run`. Units live in the names."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str | None = None
    backend: str = "redis"  # a backend descriptor's name
    client: str | None = None
    resource: str = "store"  # a resource descriptor's name
    client_options: dict[str, Any] = Field(default_factory=dict)  # passed to the lock client
    # A program speaking the stdio protocol (docs/client-protocol.md): the `stdio` client.
    client_cmd: str | None = None
    workload: Literal["lock", "leader", "cron"] = "lock"
    idempotent: bool = False  # cron: the resource deduplicates executions by job id
    nemesis: tuple[str, ...] = ("pause",)  # fault descriptors' names, or "none"
    fencing: bool = False
    time_limit_s: float = Field(30.0, gt=0)
    concurrency: int = Field(5, ge=1, le=200)
    lease_ms: int = Field(2000, ge=1)
    seed: int = 0
    store: Path = Path("store")
    runtime: Literal["netns", "docker", "ssh"] = "netns"
    hosts: tuple[str, ...] = ()  # ssh runtime: the machines, server nodes first
    ssh_user: str = "root"
    ssh_key: Path | None = None
    ssh_port: int = Field(22, ge=1, le=65535)
    sudo: bool = False
    ssh_accept_unknown: bool = False
    known_hosts: Path | None = None
    nodes: int | None = Field(None, ge=1, le=9)
    persistence: Literal["off", "everysec", "always"] = "off"
    # None: the runtime's own choice (netns: 10.77.0.0/24, private to the run's switch
    # namespace; docker: a free /24 taken under a machine-wide lock, so runs never share one).
    subnet: str | None = None
    locks: int = Field(1, ge=1, le=100)
    think_ms: float = Field(20.0, ge=0)
    writes_per_section: int = Field(3, ge=1)
    idle_ms: float = Field(10.0, ge=0)
    acquire_timeout_s: float = Field(5.0, gt=0)
    op_timeout_s: float = Field(1.0, gt=0)
    renew: bool = False
    pause_target: PauseTarget = "holder"
    # how long after the fresh grant it waited for a holder-aware fault starts, drawn uniformly
    # (0, 0: at once, as soon as the grant is seen; client-go's renew period: a random moment
    # of it, issue 29)
    pause_delay_s: tuple[float, float] = (0.0, 0.0)
    nemesis_interval_s: tuple[float, float] = (1.0, 3.0)
    fault_duration_s: tuple[float, float] | None = None
    max_drift: float = Field(0.01, ge=0, lt=1)
    replay: Path | None = None  # a recorded schedule.json: play its faults instead of drawing

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and (not v or "/" in v or v.startswith(".")):
            raise ValueError("must be a plain name without '/' or a leading '.'")
        return v

    @model_validator(mode="before")
    @classmethod
    def _client_cmd(cls, data: Any) -> Any:
        """`client_cmd` is the `stdio` client with that command as its `cmd` option."""
        if not isinstance(data, dict) or data.get("client_cmd") is None:
            return data
        cmd = data["client_cmd"]
        if not isinstance(cmd, str) or not cmd.strip():
            raise ValueError("client_cmd: must be a non-empty command line")
        if data.get("client") not in (None, "stdio"):
            raise ValueError("client_cmd: give either a client or a client command, not both")
        return {**data, "client": "stdio",
                "client_options": {**(data.get("client_options") or {}), "cmd": cmd}}

    @field_validator("subnet")
    @classmethod
    def _subnet(cls, v: str | None) -> str | None:
        if v is None:
            return v
        import ipaddress

        try:
            net = ipaddress.ip_network(v)
        except ValueError as e:
            raise ValueError(f"not an address range ({e})") from None
        if net.version != 4 or net.num_addresses < 8:
            raise ValueError("want an IPv4 range of at least 8 addresses, e.g. 10.77.0.0/24")
        return v

    @field_validator("backend")
    @classmethod
    def _backend(cls, v: str) -> str:
        return _choice("backend", v, list(catalog.backends()))

    @field_validator("resource")
    @classmethod
    def _resource(cls, v: str) -> str:
        return _choice("resource", v, list(catalog.resources()))

    @field_validator("nemesis")
    @classmethod
    def _nemesis(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        known = ["none", *fault_registry.faults()]
        return tuple(_choice("fault", f, known) for f in v)

    @field_validator("nemesis_interval_s", "fault_duration_s")
    @classmethod
    def _range(cls, v: tuple[float, float] | None) -> tuple[float, float] | None:
        if v is not None and not (0 < v[0] <= v[1]):
            raise ValueError("must be two numbers 0 < low <= high")
        return v

    @field_validator("pause_delay_s")
    @classmethod
    def _delay(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not (0 <= v[0] <= v[1]):
            raise ValueError("must be two numbers 0 <= low <= high")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> RunConfig:
        if "none" in self.nemesis and len(self.nemesis) > 1:
            raise ValueError("nemesis: 'none' cannot be combined with other faults")
        if self.runtime == "ssh" and not self.hosts:
            raise ValueError("hosts: --runtime ssh needs --hosts h1,h2,...")
        if self.store.exists() and not self.store.is_dir():
            raise ValueError(f"store: {self.store} exists and is not a directory")
        most = catalog.backend(self.backend).max_nodes
        if self.nodes is not None and self.nodes > most:
            raise ValueError(f"nodes: {self.backend} runs on at most {most} node(s)")
        return self

    @property
    def client_name(self) -> str:
        return self.client or catalog.backend(self.backend).default_client

    @property
    def node_count(self) -> int:
        return self.nodes or catalog.backend(self.backend).nodes

    @property
    def faults(self) -> tuple[str, ...]:
        return tuple(f for f in self.nemesis if f != "none")

    @property
    def test_name(self) -> str:
        if self.name:
            return self.name
        faults = "+".join(self.faults) or "none"
        fence = "fenced" if self.fencing else "unfenced"
        return f"{self.backend}-{self.client_name}-{faults}-{fence}"

    @property
    def pause_duration_s(self) -> tuple[float, float]:
        """Pauses outlast the lease by default: that is what exposes an unfenced lock. By
        half a lease and more: a Lease, an etcd lease or a ZooKeeper session is taken over only
        a lease after its holder was last seen, and then by the next poll. (Pauses of lease +
        0.5 s to 1.25 lease + 0.5 s brought the default run's first violation forward by about
        1.5 s, but missed 3 of 6 runs of python-etcd3, kazoo and kubernetes-python that these
        find.) These are upper bounds: a pause of the holder ends once its successor has
        written (fencecheck/nemesis/successor.py)."""
        if self.fault_duration_s is not None:
            return self.fault_duration_s
        lease_s = self.lease_ms / 1000
        return (lease_s * 1.5 + 0.5, lease_s * 2.5 + 1.0)


def make_config(**options: Any) -> RunConfig:
    """Build a RunConfig; a bad value raises ConfigError naming the field."""
    try:
        return RunConfig(**{k: v for k, v in options.items() if v is not None})
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "config"
        msg = err["msg"].removeprefix("Value error, ")
        given = err.get("input")
        if err["loc"] and isinstance(given, int | float | str) and str(given) not in msg:
            msg += f" (got {given!r})"
        raise ConfigError(f"bad configuration: {field}: {msg}",
                          field=str(err["loc"][0]) if err["loc"] else None) from None
