"""`fencecheck plugins`: every backend, client, resource and fault, built in or installed through
the entry-point groups, with where it comes from."""

from __future__ import annotations

import typer

from fencecheck.cli.group import console
from fencecheck.descriptors import catalog
from fencecheck.nemesis.faults.registry import faults

out = console()
err = console(stderr=True)


def plugins() -> None:
    """List backends, clients, resources and faults, and the installed plugins providing any."""
    try:
        backends = catalog.backends()
        resources = catalog.resources()
        fault_table = faults()
    except catalog.CatalogError as e:
        err.print(f"[bold red]error:[/] {e}", soft_wrap=True)
        raise typer.Exit(3) from None
    out.print("backends (clients, default first):")
    for b in backends.values():
        out.print(f"  {b.name}: {', '.join(b.client_names)}", soft_wrap=True)
    out.print("resources: " + ", ".join(resources), soft_wrap=True)
    out.print("faults: " + ", ".join(fault_table), soft_wrap=True)
    found = [p for g in catalog.GROUPS for p in catalog.plugins(g)]
    out.print("installed plugins:" + ("" if found else " none"))
    for p in found:
        out.print(f"  {p.group}: {p.name} = {p.value} ({p.dist or 'unknown distribution'})",
                  soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("plugins")(plugins)
