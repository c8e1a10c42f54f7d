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

from fencecheck.workloads.base import LockClient, Resource, SectionHost, WorkloadError

log = logging.getLogger(__name__)


def __getattr__(name: str) -> Any:
    # name -> "module:Class" tables, derived from the descriptors (and installed plugins),
    # imported only when asked for: a worker imports this module and never reads them.
    if name == "CLIENTS":
        from fencecheck.descriptors import catalog

        return {c.name: c.spec for c in catalog.clients().values()}
    if name == "RESOURCES":
        from fencecheck.descriptors import catalog

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


def _spec(kind: str, table: Mapping[str, str], name: str) -> str:
    """The "module:Class" of `name` in `table`; WorkloadError naming the known ones."""
    try:
        return table[name]
    except KeyError:
        known = ", ".join(sorted(table))
        raise WorkloadError(
            f"unknown {kind} {name!r}; known: {known} (or module:Class for your own)"
        ) from None


def client_spec(name: str) -> tuple[str, dict[str, Any]]:
    """The "module:Class" of the lock client called `name` (a plugin's "module:Class" as it
    is), and what its name adds to its options: a shipped program is built by its name."""
    if ":" in name:
        return name, {}
    from fencecheck.descriptors import catalog

    clients = catalog.clients()
    spec = _spec("client", {c.name: c.spec for c in clients.values()}, name)
    return spec, ({"program": name} if clients[name].program is not None else {})


def resource_spec(name: str) -> str:
    """The "module:Class" of the resource called `name` (a plugin's as it is)."""
    if ":" in name:
        return name
    from fencecheck.descriptors import catalog

    return _spec("resource", {r.name: r.spec for r in catalog.resources().values()}, name)


def workload_spec(name: str) -> str:
    """The "module:Class" of a workload's Worker class (fencecheck.workloads.loops.worker), by
    its descriptor; WorkloadError naming the known ones for another name."""
    from fencecheck.descriptors import catalog

    try:
        d = catalog.workloads().get(name)
    except catalog.CatalogError as e:
        raise WorkloadError(str(e)) from None
    if d is None:
        raise WorkloadError(f"workload {name!r} not one of {', '.join(catalog.workloads())}")
    return d.worker


def make_client(name: str, options: Mapping[str, Any], spec: str = "") -> LockClient:
    """Build the lock client called `name` (or a plugin "module:Class") from `options`.
    `spec`: its "module:Class" and `options` already with what `client_spec` adds, as a
    worker's config carries them (the worker then never reads the descriptors)."""
    if not spec:
        spec, extra = client_spec(name)
        options = {**options, **extra}
    cls = load_class(spec)
    log.debug("client %s -> %s.%s", name, cls.__module__, cls.__qualname__)
    return cast(LockClient, cls(options))


def make_resource(name: str, options: Mapping[str, Any], spec: str = "") -> Resource:
    """Build the resource called `name` (or a plugin "module:Class") from `options`; `spec`:
    its "module:Class" where the caller has it."""
    cls = load_class(spec or resource_spec(name))
    log.debug("resource %s -> %s.%s", name, cls.__module__, cls.__qualname__)
    return cast(Resource, cls(options))


def workload_class(name: str, spec: str = "") -> type[Any]:
    """The Worker class of a workload (see `workload_spec`), or of `spec` where given."""
    return load_class(spec or workload_spec(name))


def hosted(client: LockClient | None, name: str, options: Mapping[str, Any],
           spec: str = "") -> Resource:
    """The resource called `name` that a worker uses with `client`: its own, unless the client
    runs its critical sections in processes of its own (a `SectionHost`, such as `consul
    lock`'s child), which then carry out the reads and writes under its grants."""
    resource = make_resource(name, options, spec)
    if isinstance(client, SectionHost):
        return client.host_sections(name, options, resource)
    return resource
