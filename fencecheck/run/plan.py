"""The plan of a run: everything decided from the configuration before anything starts (which
nodes, which backend, resource and faults, which seeds), and the parts that carry it out.

`make_plan` validates (an impossible combination raises ConfigError, exit 3) and touches nothing
on the machine; the controller executes a plan with `Parts`, the factories of the real runtime,
service, resource and faults, which unit tests replace with in-memory fakes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fencecheck.clusters.base import LockService
from fencecheck.descriptors.base import BackendDescriptor, FaultDescriptor, ResourceDescriptor
from fencecheck.nemesis.faults import registry as fault_registry
from fencecheck.nemesis.faults.base import EnvFor, Fault, FaultOptions
from fencecheck.run import wiring
from fencecheck.run.config import RunConfig


@dataclass(frozen=True, slots=True)
class RunPlan:
    """What a run will start and do. `fault_seed` seeds the faults' own choices (which nodes a
    partition splits), `schedule_seed` the schedule (gaps, holds, targets)."""

    cfg: RunConfig
    backend: BackendDescriptor
    resource: ResourceDescriptor
    servers: tuple[str, ...]
    clients: tuple[str, ...]
    resource_node: str
    faults: tuple[FaultDescriptor, ...]
    schedule_seed: int
    fault_seed: int

    @property
    def nodes(self) -> tuple[str, ...]:
        """The server-side nodes the runtime makes: the servers, then the resource's node."""
        return (*self.servers, self.resource_node)


def make_plan(cfg: RunConfig) -> RunPlan:
    """The plan of cfg; raises ConfigError for a combination that cannot run."""
    wiring.check_compatible(cfg)
    table = fault_registry.faults()
    return RunPlan(
        cfg=cfg,
        backend=wiring.descriptor(cfg),
        resource=wiring.resource_descriptor(cfg),
        servers=tuple(wiring.server_nodes(cfg)),
        clients=tuple(wiring.client_nodes(cfg)),
        resource_node=wiring.RESOURCE_NODE,
        faults=tuple(table[f] for f in cfg.faults),
        schedule_seed=cfg.seed,
        fault_seed=cfg.seed + 1,
    )


@dataclass(frozen=True, slots=True)
class Parts:
    """The factories a plan is executed with. `runtime(cfg, run_id, run_dir)` returns a Runtime
    with a `ledger` attribute; `service(cfg, env_for, ledger)` the LockService;
    `resource(cfg)` the starter of the resource; `fault(descriptor, options)` a Fault;
    `report`: whether to write report.html."""

    runtime: Callable[[RunConfig, str, Path], Any]
    service: Callable[[RunConfig, EnvFor | None, Any], LockService]
    resource: Callable[[RunConfig], Any]
    fault: Callable[[FaultDescriptor, FaultOptions], Fault]
    report: bool = True


REAL_PARTS = Parts(
    runtime=wiring.make_runtime,
    service=wiring.make_service,
    resource=wiring.resource_starter,
    fault=fault_registry.build,
)
