"""Names of lock clients and resources, and the factories that build them from options.

Every client and resource class takes one argument, `options: Mapping[str, Any]`; the common keys
are `endpoints` (list of "host:port") and `op_timeout_s`, the rest are backend-specific. The
names come from the descriptors (fencecheck.descriptors.catalog, pure data); imports are lazy (a
"module:Class" string), so naming a backend never imports the others' libraries.
A name containing ":" is a user plugin, itself a "module:Class" string.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping
from typing import Any, cast

from fencecheck.descriptors import catalog
from fencecheck.workloads.base import LockClient, Resource, SectionHost, WorkloadError

log = logging.getLogger(__name__)


def __getattr__(name: str) -> Any:
    # name -> "module:Class" tables, derived from the descriptors (and installed plugins).
    if name == "CLIENTS":
        return {c.name: c.spec for c in catalog.clients().values()}
    if name == "RESOURCES":
        return {r.name: r.spec for r in catalog.resources().values()}
    raise AttributeError(name)


def load_class(spec: str) -> type[Any]:
    """Import "module:Class". Raises WorkloadError with the reason if it cannot."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise WorkloadError(f"{spec!r} is not of the form module:Class")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise WorkloadError(f"cannot import {module_name!r} for {spec!r}: {e}") from e
    try:
        cls = getattr(module, attr)
    except AttributeError:
        raise WorkloadError(f"module {module_name!r} has no {attr!r}") from None
    if not isinstance(cls, type):
        raise WorkloadError(f"{spec!r} is not a class")
    return cls


def _resolve(kind: str, table: Mapping[str, str], name: str) -> type[Any]:
    if ":" in name:
        return load_class(name)
    try:
        spec = table[name]
    except KeyError:
        known = ", ".join(sorted(table))
        raise WorkloadError(
            f"unknown {kind} {name!r}; known: {known} (or module:Class for your own)"
        ) from None
    return load_class(spec)


def make_client(name: str, options: Mapping[str, Any]) -> LockClient:
    """Build the lock client called `name` (or a plugin "module:Class") from `options`."""
    clients = catalog.clients()
    cls = _resolve("client", {c.name: c.spec for c in clients.values()}, name)
    log.debug("client %s -> %s.%s", name, cls.__module__, cls.__qualname__)
    desc = clients.get(name)
    if desc is not None and desc.program is not None:  # a shipped program: its build by name
        options = {**options, "program": name}
    return cast(LockClient, cls(options))


def make_resource(name: str, options: Mapping[str, Any]) -> Resource:
    """Build the resource called `name` (or a plugin "module:Class") from `options`."""
    cls = _resolve("resource", {r.name: r.spec for r in catalog.resources().values()}, name)
    log.debug("resource %s -> %s.%s", name, cls.__module__, cls.__qualname__)
    return cast(Resource, cls(options))


def workload_class(name: str) -> type[Any]:
    """The Worker class (fencecheck.workloads.loops.worker) of a workload, by its descriptor;
    WorkloadError naming the known ones for another name."""
    try:
        d = catalog.workloads().get(name)
    except catalog.CatalogError as e:
        raise WorkloadError(str(e)) from None
    if d is None:
        raise WorkloadError(f"workload {name!r} not one of {', '.join(catalog.workloads())}")
    return load_class(d.worker)


def hosted(client: LockClient | None, name: str, options: Mapping[str, Any]) -> Resource:
    """The resource called `name` that a worker uses with `client`: its own, unless the client
    runs its critical sections in processes of its own (a `SectionHost`, such as `consul
    lock`'s child), which then carry out the reads and writes under its grants."""
    resource = make_resource(name, options)
    if isinstance(client, SectionHost):
        return client.host_sections(name, options, resource)
    return resource
