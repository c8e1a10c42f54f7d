"""Wiring from a RunConfig to concrete parts: which nodes a run needs, its runtime, its lock
service, the options its clients get, the resource and the faults. Every fact about a backend,
client, resource or fault comes from its descriptor (fencecheck.descriptors,
fencecheck.nemesis.faults);
nothing here names one."""

from __future__ import annotations

import importlib
from typing import Any

from fencecheck.clusters.base import ClusterError, LockService
from fencecheck.descriptors import catalog
from fencecheck.descriptors.base import CLOCK, BackendDescriptor, ResourceDescriptor
from fencecheck.descriptors.extras import install_hint, is_installed, missing_module_message
from fencecheck.nemesis.faults.registry import faults as fault_table
from fencecheck.run.config import ConfigError, RunConfig
from fencecheck.run.resources import STORE_PORT, store_argv
from fencecheck.workloads.base import WorkloadError

__all__ = ["STORE_PORT", "store_argv"]

RESOURCE_NODE = "r1"


def _load(spec: str) -> Any:
    module, _, name = spec.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"backend not available in this build: {spec} ({e})") from None


def __getattr__(name: str) -> Any:
    # The tables other modules and tests read, derived from the descriptors on demand.
    if name == "SERVICES":
        return {b.name: b.service for b in catalog.backends().values()}
    if name == "CLIENTS":
        return {b.name: b.client_names for b in catalog.backends().values()}
    if name == "RUNTIMES":
        return {r.name: r.factory for r in catalog.runtimes().values()}
    raise AttributeError(name)


def descriptor(cfg: RunConfig) -> BackendDescriptor:
    return catalog.backend(cfg.backend)


def resource_descriptor(cfg: RunConfig) -> ResourceDescriptor:
    return catalog.resources()[cfg.resource]


def make_runtime(cfg: RunConfig, run_id: str, run_dir: Any) -> Any:
    """The runtime of cfg.runtime, built with (run_id, run directory, **its options), and
    `local_nodes` where its descriptor runs the resource on this host; each exposes `setup`,
    `teardown` and `ledger`."""
    d = catalog.runtimes()[cfg.runtime]
    kwargs = cfg.settings("runtime")
    if d.local_resource:
        kwargs["local_nodes"] = (RESOURCE_NODE,)
    return _load(d.factory)(run_id, run_dir, **kwargs)


def weight(cfg: RunConfig) -> int:
    """A run's share of the machine, as its descriptors declare it (the backend's, plus what
    its client's workers add): what `fencecheck matrix --jobs` adds up."""
    b = descriptor(cfg)
    c = next((x for x in b.clients if x.name == cfg.client_name), None)
    return max(1, b.weight + (c.weight if c is not None else 0))


def server_nodes(cfg: RunConfig) -> list[str]:
    return [f"n{i + 1}" for i in range(cfg.node_count)]


def client_nodes(cfg: RunConfig) -> list[str]:
    return [f"c{i + 1}" for i in range(cfg.concurrency)]


def _needs_module(what: str, spec: str) -> None:
    """Import the module of `spec` ("module:Name"); a Python package it needs that this install
    lacks (an extra's, on a core install) is ConfigError naming the extra to install. So is the
    `PYTHON_DIST` a module declares for a package it imports only where it uses it."""
    try:
        module = importlib.import_module(spec.partition(":")[0])
    except ModuleNotFoundError as e:
        if e.name is None or e.name.split(".")[0] == "fencecheck":
            raise
        raise ConfigError(f"bad configuration: {missing_module_message(e.name, what)}") \
            from None
    dist = getattr(module, "PYTHON_DIST", None)
    if isinstance(dist, str) and not is_installed(dist):
        raise ConfigError(f"bad configuration: {what} needs the Python package {dist}, which "
                          f"this install lacks: {install_hint(dist)}")


def check_installed(cfg: RunConfig) -> None:
    """Every Python package the run's parts need is installed: the modules of its runtime,
    service, resource, faults and lock client import, and the client's library (imported only
    inside the worker) is there. Before anything is created, one line naming the extra."""
    b = descriptor(cfg)
    r = resource_descriptor(cfg)
    table = fault_table()
    parts = [(f"--runtime {cfg.runtime}", catalog.runtimes()[cfg.runtime].factory),
             (f"backend {b.name}", b.service), (f"resource {r.name}", r.spec),
             (f"resource {r.name}", r.starter),
             *((f"nemesis {n}", table[n].factory) for n in cfg.faults if n in table)]
    c = next((x for x in b.clients if x.name == cfg.client_name), None)
    if c is not None:
        parts.append((f"client {c.name}", c.spec))
        if c.dist is not None and not is_installed(c.dist):
            raise ConfigError(f"bad configuration: client {c.name} needs the Python package "
                              f"{c.dist}, which this install lacks: {install_hint(c.dist)}")
    for what, spec in parts:
        _needs_module(what, spec)
    for n in cfg.faults:
        for need in table[n].needs if n in table else ():
            if need.dist is not None and not is_installed(need.dist):
                raise ConfigError(f"bad configuration: nemesis {n} needs the Python package "
                                  f"{need.dist}, which this install lacks: "
                                  f"{install_hint(need.dist)}")


def check_compatible(cfg: RunConfig) -> None:
    """Refuse combinations that cannot run, before anything is created: each message names both
    sides of the clash."""
    b = descriptor(cfg)
    check_installed(cfg)
    known = b.client_names
    if ":" not in cfg.client_name and cfg.client_name not in known:
        raise ConfigError(
            f"bad configuration: client: {cfg.client_name!r} does not drive backend "
            f"{cfg.backend!r} (choose one of {', '.join(known)}, or module:Class)"
        )
    c = next((x for x in b.clients if x.name == cfg.client_name), None)
    if c is not None and cfg.workload not in c.workloads:  # e.g. ShedLock: one run of a job
        raise ConfigError(f"bad configuration: client: {c.name!r} drives the "
                          f"{' or '.join(sorted(c.workloads))} workload, not --workload "
                          f"{cfg.workload}")
    try:  # a shipped client that is not built, a --client-cmd that is not there
        _load("fencecheck.workloads.clients.third_party:check_ready")(cfg.client_name,
            cfg.client_options)
    except WorkloadError as e:
        raise ConfigError(f"bad configuration: client: {e}") from None
    if c is not None and c.settings_check is not None:  # settings its library refuses
        try:
            _load(c.settings_check)(cfg.client_options, cfg.lease_ms)
        except WorkloadError as e:
            raise ConfigError(f"bad configuration: client: {e}") from None
    if b.preflight is not None:  # e.g. a server binary built on demand, not built yet
        try:
            _load(b.preflight)()
        except ClusterError as e:
            raise ConfigError(f"bad configuration: backend: {b.name}: {e}") from None
    if cfg.runtime not in b.runtimes:
        raise ConfigError(f"bad configuration: runtime: backend {b.name!r} does not run under "
                          f"--runtime {cfg.runtime} (supports {', '.join(sorted(b.runtimes))})")
    r = resource_descriptor(cfg)
    if r.workloads is not None and cfg.workload not in r.workloads:
        need = [x.name for x in catalog.resources().values()
                if x.workloads is None or cfg.workload in x.workloads]
        raise ConfigError(f"bad configuration: resource: the {cfg.workload} workload needs "
                          f"--resource {' or '.join(need)}")
    if r.backends is not None and cfg.backend not in r.backends:
        raise ConfigError(f"bad configuration: resource: {r.name!r} needs --backend "
                          f"{' or '.join(sorted(r.backends))}")
    table = fault_table()
    for name in cfg.faults:
        f = table[name]
        missing = f.requires - b.capabilities
        if missing:
            able = [x.name for x in catalog.backends().values() if f.requires <= x.capabilities]
            why = b.clock_refusal if CLOCK in missing and b.clock_refusal else (
                f"it needs {', '.join(sorted(missing))} (backends that have it: "
                f"{', '.join(able) or 'none'})")
            raise ConfigError(f"bad configuration: nemesis: {name}: not supported by backend "
                              f"{b.name!r}: {why}")
        if cfg.runtime not in f.runtimes:
            raise ConfigError(f"bad configuration: nemesis: {name} is not supported under "
                              f"--runtime {cfg.runtime} (supports "
                              f"{', '.join(sorted(f.runtimes))})")


def make_service(cfg: RunConfig, env_for: Any = None, ledger: Any = None) -> LockService:
    """The backend's LockService, built with its own options (`--backend-opt`) and those of
    the run's keyword arguments its descriptor declares (`service_args`)."""
    b = descriptor(cfg)
    cls = _load(b.service)
    offered: dict[str, Any] = {"env_for": env_for, "ledger": ledger, "lease_ms": cfg.lease_ms}
    if env_for is not None and "env_for" not in b.service_args:
        raise ConfigError(f"bad configuration: nemesis: clock: {cfg.backend} cannot run "
                          "under the clock shim")
    kwargs = {k: v for k, v in offered.items() if k in b.service_args and v is not None}
    service: LockService = cls(**kwargs, **cfg.settings("backend"))
    return service


def client_options(cfg: RunConfig, service: LockService) -> dict[str, Any]:
    from fencecheck.clusters.base import ClientOptions

    opts: dict[str, Any] = {"endpoints": service.endpoints(), "op_timeout_s": cfg.op_timeout_s}
    if isinstance(service, ClientOptions):
        opts.update(service.client_options())
    opts.update(cfg.client_options)
    return opts


def resource_starter(cfg: RunConfig) -> Any:
    """The controller-side starter of cfg.resource (see fencecheck.run.resources)."""
    return _load(resource_descriptor(cfg).starter)
