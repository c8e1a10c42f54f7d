"""`fencecheck plugins`: every backend, client, resource, fault, runtime, workload and check (with
its violation kinds), built in or installed through the entry-point groups, with where it comes
from."""

from __future__ import annotations

import typer

from fencecheck.checker import registry as check_registry
from fencecheck.cli.group import console, shown
from fencecheck.descriptors import catalog
from fencecheck.descriptors.extras import install_hint

out = console()
err = console(stderr=True)


def _fault_names() -> str:
    """The faults' names; a core install (no pydantic, whose models the faults' options are)
    has none to run, and is told which extra brings them."""
    try:
        from fencecheck.nemesis.faults.registry import faults
    except ModuleNotFoundError as e:
        if e.name is None or e.name.split(".")[0] == "fencecheck":
            raise
        return f"none on this install (they need {e.name}: {install_hint(e.name)})"
    return ", ".join(faults())


def plugins() -> None:
    """List backends, clients, resources, faults, runtimes, workloads and checks, and the
    installed plugins."""
    try:
        backends = catalog.backends()
        resources = catalog.resources()
        fault_names = _fault_names()
        runtimes = catalog.runtimes()
        workloads = catalog.workloads()
        checks = check_registry.checks()
    except (catalog.CatalogError, check_registry.CheckRegistryError) as e:
        err.print(f"[bold red]error:[/] {e}", soft_wrap=True)
        raise typer.Exit(3) from None
    out.print("backends (clients, default first):")
    for b in backends.values():
        out.print(f"  {b.name}: {', '.join(b.client_names)}", soft_wrap=True)
    out.print("resources: " + ", ".join(resources), soft_wrap=True)
    out.print("faults: " + shown(fault_names), soft_wrap=True)
    out.print("runtimes: " + ", ".join(runtimes), soft_wrap=True)
    out.print("workloads: " + ", ".join(workloads), soft_wrap=True)
    out.print("checks (violation kinds):")
    for c in checks:
        out.print(f"  {c.name}: {', '.join(k.name for k in c.kinds)}", soft_wrap=True)
    groups = (*catalog.GROUPS, check_registry.ENTRY_POINT_GROUP)
    found = [p for g in groups for p in catalog.plugins(g)]
    out.print("installed plugins:" + ("" if found else " none"))
    for p in found:
        out.print(f"  {p.group}: {p.name} = {p.value} ({p.dist or 'unknown distribution'})",
                  soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("plugins")(plugins)
