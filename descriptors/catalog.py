"""Every backend, lock client and resource: the built-in descriptor modules plus what installed
plugins register under the entry-point groups `fencecheck.backends` (a BackendDescriptor),
`fencecheck.clients` (a ClientPlugin: a client and the backends it drives) and
`fencecheck.resources` (a ResourceDescriptor), `fencecheck.runtimes` (a RuntimeDescriptor) and
`fencecheck.workloads` (a WorkloadDescriptor); see docs/extending.md. Every table that lists
backends is derived from here."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import logging
import pkgutil
import sys
from dataclasses import dataclass
from importlib.metadata import EntryPoints, entry_points
from types import ModuleType
from typing import Protocol, TypeVar

from fencecheck.descriptors import (
    consul,
    etcd,
    galera,
    hazelcast,
    hazelcast_unsafe,
    kubernetes,
    mariadb,
    nats,
    postgres_advisory,
    redis,
    redlock,
    sentinel,
    zookeeper,
)
from fencecheck.descriptors.base import (
    BackendDescriptor,
    ClientDescriptor,
    ResourceDescriptor,
    RuntimeDescriptor,
    WorkloadDescriptor,
)
from fencecheck.descriptors.base import CatalogError as CatalogError  # re-exported
from fencecheck.descriptors.resources import RESOURCES as BUILTIN_RESOURCES
from fencecheck.descriptors.runtimes import RUNTIMES as BUILTIN_RUNTIMES
from fencecheck.descriptors.workloads import WORKLOADS as BUILTIN_WORKLOADS

log = logging.getLogger(__name__)

T = TypeVar("T")

# In this order first (it is the order of --help and of error messages); any other module of
# this package with a BACKEND is found by `discover`, so a new backend edits no existing file.
BUILTIN_BACKENDS: tuple[BackendDescriptor, ...] = (
    redis.BACKEND, redlock.BACKEND, sentinel.BACKEND, etcd.BACKEND, zookeeper.BACKEND,
    postgres_advisory.BACKEND, mariadb.BACKEND, galera.BACKEND,
    kubernetes.BACKEND, nats.BACKEND, hazelcast.BACKEND, hazelcast_unsafe.BACKEND, consul.BACKEND,
)

# The user's own program (--client-cmd; docs/client-protocol.md) drives every backend and every
# workload (the protocol has job locks for `cron`; shipped programs hold leader elections).
STDIO_CLIENT = ClientDescriptor("stdio", "fencecheck.workloads.clients.stdio:StdioClient",
                                token="what the program replies")

GROUPS = ("fencecheck.backends", "fencecheck.clients", "fencecheck.resources", "fencecheck.faults",
          "fencecheck.runtimes", "fencecheck.workloads")



@dataclass(frozen=True, slots=True)
class ClientPlugin:
    """What the `fencecheck.clients` group registers: a client for existing backends."""

    client: ClientDescriptor
    backends: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Plugin:
    """One entry point as `fencecheck plugins` lists it."""

    group: str
    name: str
    value: str
    dist: str | None


@functools.cache
def _entry_points() -> EntryPoints:
    """The installed entry points of every `fencecheck.*` group (GROUPS, the checks' group,
    any other), read once a process: each `entry_points(group=...)` reads every
    distribution's metadata again (18 ms of CPU for the four groups a worker asks for, against
    3 ms for all at once)."""
    everything = entry_points()  # 3.11: SelectableGroups; 3.12 on: EntryPoints (both select)
    return EntryPoints(ep for group in everything.groups if group.startswith("fencecheck.")
                       for ep in everything.select(group=group))


def plugins(group: str) -> list[Plugin]:
    out = []
    for ep in _entry_points().select(group=group):
        dist = ep.dist.name if ep.dist is not None else None
        out.append(Plugin(group, ep.name, ep.value, dist))
    return sorted(out, key=lambda p: p.name)


def load_group(group: str, kind: type[T]) -> list[T]:
    """The loaded objects of `group`; each must be an instance of `kind`."""
    out: list[T] = []
    for ep in _entry_points().select(group=group):
        try:
            obj = ep.load()
        except Exception as e:  # a broken plugin names itself, not a traceback
            raise CatalogError(f"plugin {ep.name} ({ep.value}) in {group} does not load: {e}") \
                from None
        if not isinstance(obj, kind):
            raise CatalogError(f"plugin {ep.name} ({ep.value}) in {group} is not a "
                               f"{kind.__name__}")
        out.append(obj)
    return out


def discover(package: ModuleType, attr: str, kind: type[T]) -> list[T]:
    """The `attr` of every module of `package` that has one of type `kind`, by module name."""
    found = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        obj = getattr(importlib.import_module(f"{package.__name__}.{info.name}"), attr, None)
        if isinstance(obj, kind):
            found.append(obj)
    return found


@functools.cache
def backends() -> dict[str, BackendDescriptor]:
    """Every backend by name, with plugin clients appended to the backends they drive."""
    table = {b.name: b for b in BUILTIN_BACKENDS}
    for b in discover(sys.modules[__package__ or "fencecheck.descriptors"], "BACKEND",
                      BackendDescriptor):
        table.setdefault(b.name, b)
    for b in load_group("fencecheck.backends", BackendDescriptor):
        table[b.name] = b
    table = {n: dataclasses.replace(b, clients=(*b.clients, STDIO_CLIENT))
             for n, b in table.items()}
    for p in load_group("fencecheck.clients", ClientPlugin):
        for name in p.backends:
            if name not in table:
                raise CatalogError(f"plugin client {p.client.name} drives unknown backend "
                                   f"{name!r}")
            b = table[name]
            table[name] = dataclasses.replace(b, clients=(*b.clients, p.client))
    return table


def backend(name: str) -> BackendDescriptor:
    return backends()[name]


@functools.cache
def clients() -> dict[str, ClientDescriptor]:
    """Every client by name (a client driving several backends is listed once)."""
    out: dict[str, ClientDescriptor] = {}
    for b in backends().values():
        for c in b.clients:
            out.setdefault(c.name, c)
    return out


class _Named(Protocol):
    @property
    def name(self) -> str: ...


N = TypeVar("N", bound=_Named)


def _named(builtin: tuple[N, ...], group: str, kind: type[N]) -> dict[str, N]:
    """The built-in descriptors by name, with those of the entry-point group over them."""
    table = {d.name: d for d in builtin}
    for d in load_group(group, kind):
        table[d.name] = d
    return table


@functools.cache
def resources() -> dict[str, ResourceDescriptor]:
    return _named(BUILTIN_RESOURCES, "fencecheck.resources", ResourceDescriptor)


@functools.cache
def runtimes() -> dict[str, RuntimeDescriptor]:
    return _named(BUILTIN_RUNTIMES, "fencecheck.runtimes", RuntimeDescriptor)


@functools.cache
def workloads() -> dict[str, WorkloadDescriptor]:
    return _named(BUILTIN_WORKLOADS, "fencecheck.workloads", WorkloadDescriptor)
