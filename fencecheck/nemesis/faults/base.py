"""The fault protocol, what a fault is built with and bound to, and what the schedule shows it.

Lifecycle, in the controller's order: built with FaultOptions before anything starts; if it is
a ServiceEnv, `prepare` runs before the lock service starts (its env goes to every server); if
it is a ServiceDirs, `place` runs once the service is built and before it starts; if
it is a ClientRoutes, `route` runs before the workers start (their options go through it); if
its descriptor declares `worker_env`, `worker_env` runs before the workers start (their env);
`bind` once the service and the workers run; then any number of `start`/`stop` pairs from the
schedule; `heal` on every exit path (idempotent, undoes whatever is still in effect).
A fault never changes the lock service's logical state beyond its fault.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from fencecheck.clusters.base import Cluster, LockService

EnvFor = Callable[[str], Mapping[str, str]]


def low_high(v: Any) -> Any:
    """`LOW,HIGH` (or one number for both) from the command line as a pair; else `v` as given."""
    if isinstance(v, str):
        lo, _, hi = v.partition(",")
        return (lo, hi or lo)
    return v


class FaultSettings(BaseModel):
    """A fault's own options (`--fault-opt NAME.KEY=VALUE`, a RunConfig's `fault_options`):
    what every fault has. A fault's descriptor may name a subclass with more (`options`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    target: Literal["holder", "random"] = Field(
        default="holder",
        description="holder: a fault that waits for a grant starts right after a fresh one, "
        "aimed at its holder; random: at random times and targets")
    delay_s: tuple[float, float] | None = Field(
        default=None,
        description="target=holder: seconds after the fresh grant the fault starts, LOW,HIGH, "
        "drawn uniformly (default: at once; client-go's renew period: a random moment of it)")

    @field_validator("delay_s", mode="before")
    @classmethod
    def _delay_pair(cls, v: Any) -> Any:
        return low_high(v)

    @field_validator("delay_s")
    @classmethod
    def _delay_range(cls, v: tuple[float, float] | None) -> tuple[float, float] | None:
        if v is not None and not (0 <= v[0] <= v[1]):
            raise ValueError("must be two numbers 0 <= low <= high")
        return v


def lease_hold_s(lease_ms: int) -> tuple[float, float]:
    """The default hold of a fault that must outlast the lease (a pause, a delay): by half a
    lease and more. A Lease, an etcd lease or a ZooKeeper session is taken over only a lease
    after its holder was last seen, and then by the next poll. (Pauses of lease + 0.5 s to
    1.25 lease + 0.5 s brought the default run's first violation forward by about 1.5 s, but
    missed 3 of 6 runs of python-etcd3, kazoo and kubernetes-python that these find.) These are
    upper bounds: a pause of the holder ends once its successor has written
    (fencecheck/nemesis/successor.py)."""
    lease_s = lease_ms / 1000
    return (lease_s * 1.5 + 0.5, lease_s * 2.5 + 1.0)


class HoldSettings(FaultSettings):
    """A fault whose hold outlasts the lease by default (`lease_hold_s`)."""

    hold_s: tuple[float, float] | None = Field(
        default=None,
        description="seconds one fault holds, LOW,HIGH (default from the lease: 1.5 lease + 0.5 "
        "to 2.5 lease + 1; --fault-duration overrides every fault's)")

    @field_validator("hold_s", mode="before")
    @classmethod
    def _pair(cls, v: Any) -> Any:
        return low_high(v)

    @field_validator("hold_s")
    @classmethod
    def _range(cls, v: tuple[float, float] | None) -> tuple[float, float] | None:
        if v is not None and not (0 < v[0] <= v[1]):
            raise ValueError("must be two numbers 0 < low <= high")
        return v

    def hold_range_s(self, lease_ms: int) -> tuple[float, float]:
        return self.hold_s if self.hold_s is not None else lease_hold_s(lease_ms)


@dataclass(frozen=True, slots=True)
class FaultOptions:
    """What a fault is built with: the run's settings that shape it, its own settings (the
    validated model its descriptor names, `settings`; FaultSettings where it names none) and its
    own seeded rng (shared by the run's faults, seeded from the run's seed). `pause_target` and
    `pause_duration_s` are the pause fault's target and hold as earlier releases passed them to
    every fault; a fault reads its own `settings`."""

    run_id: str
    run_dir: Path
    backend: str
    lease_ms: int
    pause_target: str  # "holder" | "random" | "server"
    pause_duration_s: tuple[float, float]
    rng: random.Random
    settings: Any = None


@dataclass(frozen=True, slots=True)
class FaultContext:
    """What a fault acts on once the run is up. `workers`: worker name -> local pid."""

    cluster: Cluster
    servers: Sequence[str]
    resource_node: str
    service: LockService
    workers: Mapping[str, int]
    ledger: Any = None


@dataclass(frozen=True, slots=True)
class ScheduleView:
    """What the schedule knows when a fault starts. `holding`: workers holding a lock now;
    `fresh_holder`: the worker of the fresh grant a holder-aware start waited for (None when it
    waited in vain); `waited`: whether this start waited for a grant at all."""

    workers: Sequence[str]
    servers: Sequence[str]
    holding: Sequence[str]
    fresh_holder: str | None = None
    waited: bool = False


class Fault(Protocol):
    """One kind of fault in one run."""

    name: str

    def bind(self, ctx: FaultContext) -> None:
        """Find the targets this fault acts on. Must not inject anything yet."""
        ...

    def hold_range_s(self) -> tuple[float, float]:
        """How long one fault holds by default (the schedule draws within it; --fault-duration
        overrides it)."""
        ...

    def targets(self, rng: random.Random, view: ScheduleView) -> Any:
        """The value of the next start (JSON-able: the history and schedule.json record it).
        Draws only from rng. It names its targets: a replay passes a recorded value to `start`
        as it is, except when it named the fresh holder (then `targets` is asked again)."""
        ...

    def start(self, value: Any) -> Any:
        """Inject the fault; returns what the completion records."""
        ...

    def stop(self) -> Any:
        """Undo the fault started last; returns what the completion records."""
        ...

    def heal(self) -> None:
        """Undo every fault still in effect. Idempotent; runs on every exit path."""
        ...


@runtime_checkable
class ServiceEnv(Protocol):
    """A fault that must shape the servers' environment before they start (the clock shim)."""

    def prepare(self, stack: ExitStack) -> EnvFor:
        """Set up; register its undo on stack first; return env_for(node) for the servers."""
        ...


@runtime_checkable
class ServiceDirs(Protocol):
    """A fault that must place the servers' data directories (the lose-unsynced file system):
    runs once the service is built and before it starts, so its undo (registered on stack
    first) runs after the service's teardown; `ledger` records what it makes."""

    def place(self, service: LockService, nodes: Sequence[str], stack: ExitStack,
              ledger: Any) -> None: ...


@runtime_checkable
class WorkerEnv(Protocol):
    """A fault whose descriptor says `worker_env`: the workers (and the client programs they
    start) run with the environment it gives (the clock shim on the client nodes)."""

    def worker_env(self, stack: ExitStack) -> EnvFor:
        """Set up; register its undo on stack first; return env_for(worker) for the workers."""
        ...


@runtime_checkable
class ClientRoutes(Protocol):
    """A fault that stands in the workers' data path (the delay proxies): it runs after the
    resource starts and before the workers do, may start things on the client nodes (undo
    registered on stack first; `ledger` records processes), and returns the resource's and the
    lock client's options with their addresses pointed through it."""

    def route(self, cluster: Cluster, stack: ExitStack, ledger: Any,
              resource_options: dict[str, Any],
              client_options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]: ...


@runtime_checkable
class ServiceUp(Protocol):
    """A fault that acts once the service and the resource are up and before any worker starts
    (the lose-unsynced checkpoint: what the servers wrote while starting is durable, what a
    worker made them write is not yet)."""

    def service_up(self, service: LockService, servers: Sequence[str]) -> None: ...


# Target roles of a schedule step (schedule.json): what a replay aims the step at.
HOLDER = "holder"  # the worker that got the fresh grant the step waited for
AS_NAMED = "as named"  # the recorded targets, by node or worker name
PRIMARY = "primary"  # whichever node is primary when the fault starts
MINORITY = "minority"  # a minority of the servers cut off: the one with the primary, if any
MAJORITY = "majority"  # a minority cut off while the primary stays in the majority
ROLES = (HOLDER, AS_NAMED, PRIMARY, MINORITY, MAJORITY)


@runtime_checkable
class RoleTargets(Protocol):
    """A fault that resolves a role (the primary, a minority or majority side) when it starts
    rather than naming nodes in `targets`: it tells the schedule what role a start aimed at."""

    def recorded(self, value: Any, started: Any) -> tuple[str, Any] | None:
        """From a start's value and what it returned: the role (one of ROLES) and the value
        that makes a replayed `start` aim at that role again, resolved then; None to leave it
        to the schedule (the holder if the value named it, else as named)."""
        ...


class NoFault:
    """The no-op fault."""

    name = "none"

    def bind(self, ctx: FaultContext) -> None:
        return None

    def hold_range_s(self) -> tuple[float, float]:
        return (3.0, 6.0)

    def targets(self, rng: random.Random, view: ScheduleView) -> Any:
        return None

    def start(self, value: Any) -> Any:
        return None

    def stop(self) -> Any:
        return None

    def heal(self) -> None:
        return None


def default_targets(view: ScheduleView) -> dict[str, Any]:
    """Who a network or clock fault should aim at: the current holder and the clients."""
    return {"holder": next(iter(view.holding), None), "clients": list(view.workers)}
