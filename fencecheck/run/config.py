"""The configuration of one run (`RunConfig`), validated with pydantic, and its defaults.

Every option of `fencecheck run` lands here; a bad value becomes `ConfigError` naming the field,
which the CLI prints as one line with exit code 3.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from fencecheck.descriptors import catalog
from fencecheck.nemesis.faults import registry as fault_registry
from fencecheck.nemesis.faults.base import lease_hold_s
from fencecheck.run import options
from fencecheck.run.errors import ConfigError as ConfigError  # re-exported
from fencecheck.run.options import OptionError as OptionError


def _choice(kind: str, name: str, known: list[str]) -> str:
    if name not in known:
        raise ValueError(f"unknown {kind} {name!r} (choose one of {', '.join(known)})")
    return name




class RunConfig(BaseModel):
    """One run of `fencecheck run`. Units live in the names. What configures one part (the
    backend, client, resource, runtime, workload, each fault) is that part's own options, kept
    by owner and checked against its descriptor's model (fencecheck/run/options.py); the flat
    names of earlier releases (`persistence`, `ssh_user`, `think_ms`, `pause_target`, ...) are
    accepted as aliases."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str | None = None
    backend: str = "redis"  # a backend descriptor's name
    client: str | None = None
    resource: str = "store"  # a resource descriptor's name
    # A program speaking the stdio protocol (docs/client-protocol.md): the `stdio` client.
    client_cmd: str | None = None
    workload: str = "lock"  # a workload descriptor's name
    nemesis: tuple[str, ...] = ("pause",)  # fault descriptors' names, or "none"
    fencing: bool = False
    time_limit_s: float = Field(30.0, gt=0)
    concurrency: int = Field(5, ge=1, le=200)
    lease_ms: int = Field(2000, ge=1)
    seed: int = 0
    store: Path = Path("store")
    runtime: str = "netns"  # a runtime descriptor's name
    nodes: int | None = Field(None, ge=1, le=9)
    locks: int = Field(1, ge=1, le=100)
    op_timeout_s: float = Field(1.0, gt=0)
    nemesis_interval_s: tuple[float, float] = (1.0, 3.0)
    fault_duration_s: tuple[float, float] | None = None  # every fault's hold, where given
    max_drift: float = Field(0.01, ge=0, lt=1)
    replay: Path | None = None  # a recorded schedule.json: play its faults instead of drawing
    # Each owner's options, whole (its model's defaults filled in), as test.json records them.
    backend_options: dict[str, Any] = Field(default_factory=dict)
    client_options: dict[str, Any] = Field(default_factory=dict)  # passed to the lock client
    resource_options: dict[str, Any] = Field(default_factory=dict)
    runtime_options: dict[str, Any] = Field(default_factory=dict)
    workload_options: dict[str, Any] = Field(default_factory=dict)
    fault_options: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and (not v or "/" in v or v.startswith(".")):
            raise ValueError("must be a plain name without '/' or a leading '.'")
        return v

    @model_validator(mode="before")
    @classmethod
    def _owners(cls, data: Any) -> Any:
        """`client_cmd` is the `stdio` client with that command as its `cmd` option; then each
        owner's options are checked and made whole (fencecheck/run/options.py: an OptionError,
        which names the owner's flag and the field, passes through pydantic unwrapped)."""
        if not isinstance(data, dict):
            return data
        if data.get("client_cmd") is not None:
            cmd = data["client_cmd"]
            if not isinstance(cmd, str) or not cmd.strip():
                raise ValueError("client_cmd: must be a non-empty command line")
            if data.get("client") not in (None, "stdio"):
                raise ValueError("client_cmd: give either a client or a client command, not "
                                 "both")
            data = {**data, "client": "stdio",
                    "client_options": {**(data.get("client_options") or {}), "cmd": cmd}}
        return options.resolve(data)

    @field_validator("backend", "resource", "runtime", "workload")
    @classmethod
    def _named(cls, v: str, info: ValidationInfo) -> str:
        """A descriptor's name, of the kind the field names."""
        kind = str(info.field_name)
        return _choice(kind, v, list(options.descriptors(kind)))

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

    @model_validator(mode="after")
    def _consistent(self) -> RunConfig:
        if "none" in self.nemesis and len(self.nemesis) > 1:
            raise ValueError("nemesis: 'none' cannot be combined with other faults")
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

    def settings(self, owner: str, fault: str | None = None) -> dict[str, Any]:
        """One owner's options as its model's values (a Path as a Path); `fault` names which."""
        if owner == "fault":
            assert fault is not None
            return options.typed("fault", fault, self.fault_options.get(fault, {}))
        name = self.client_name if owner == "client" else getattr(self, owner)
        return options.typed(owner, name, getattr(self, options.FIELD[owner]))

    def fault_target(self, fault: str) -> str:
        """A fault's `target` ("holder": it waits for a fresh grant, where it waits at all)."""
        return str(self.fault_options.get(fault, {}).get("target", "holder"))

    def fault_delay_s(self, fault: str) -> tuple[float, float]:
        """How long after its fresh grant a holder-aware fault starts, drawn uniformly
        (`--fault-opt F.delay_s`, `--pause-delay`; (0, 0): at once)."""
        delay = self.settings("fault", fault).get("delay_s")
        return (float(delay[0]), float(delay[1])) if delay else (0.0, 0.0)

    @property
    def pause_target(self) -> str:
        """The pause fault's target as earlier releases named it (FaultOptions.pause_target)."""
        return self.fault_target("pause") if "pause" in self.faults else "holder"

    @property
    def pause_duration_s(self) -> tuple[float, float]:
        """How long a pause holds (`--fault-opt pause.hold_s`, `--fault-duration` over every
        fault), as earlier releases gave it to every fault (FaultOptions.pause_duration_s).
        Pauses outlast the lease by default (faults/base.py: `lease_hold_s`): that is what
        exposes an unfenced lock."""
        if self.fault_duration_s is not None:
            return self.fault_duration_s
        hold = self.fault_options.get("pause", {}).get("hold_s")
        return (float(hold[0]), float(hold[1])) if hold else lease_hold_s(self.lease_ms)


def make_config(**given: Any) -> RunConfig:
    """Build a RunConfig; a bad value raises ConfigError naming the field (an OptionError, a
    ConfigError too, where it is one owner's option)."""
    try:
        return RunConfig(**{k: v for k, v in given.items() if v is not None})
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "config"
        msg = err["msg"].removeprefix("Value error, ")
        got = err.get("input")
        if err["loc"] and isinstance(got, int | float | str) and str(got) not in msg:
            msg += f" (got {got!r})"
        raise ConfigError(f"bad configuration: {field}: {msg}",
                          field=str(err["loc"][0]) if err["loc"] else None) from None


def fault_settings(cfg: RunConfig, fault: str) -> Any:
    """A fault's settings, its model's instance (what FaultOptions.settings carries), with the
    hold --fault-duration fixed, where the fault has one."""
    model = options.model_for("fault", fault)
    if model is None:
        return None
    values = dict(cfg.fault_options.get(fault, {}))
    if cfg.fault_duration_s is not None and "hold_s" in model.model_fields:
        values["hold_s"] = cfg.fault_duration_s
    return model.model_validate(values)


def config_schema() -> dict[str, Any]:
    """The JSON Schema of a run's configuration as test.json records it (`fencecheck schema
    config`): RunConfig's fields, and each owner's options model where the configuration names
    that owner."""
    base = RunConfig.model_json_schema(mode="serialization")
    base = {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "fencecheck run configuration",
            "description": "test.json's `config`: a run's options, each owner's in its own "
                           "table (backend_options, client_options, resource_options, "
                           "runtime_options, workload_options, fault_options)", **base}
    return options.config_schema(base)
