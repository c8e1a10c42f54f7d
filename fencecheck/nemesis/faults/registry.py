"""Every fault: the built-in modules plus the FaultDescriptors installed plugins register under
the entry-point group `fencecheck.nemesis.faults`; and building one from its descriptor."""

from __future__ import annotations

import functools
import importlib

import fencecheck.nemesis.faults
from fencecheck.descriptors.base import FaultDescriptor
from fencecheck.descriptors.catalog import CatalogError, discover, load_group
from fencecheck.nemesis.faults import clock, failover, kill, partition, pause
from fencecheck.nemesis.faults.base import Fault, FaultOptions

BUILTIN: tuple[FaultDescriptor, ...] = (
    pause.DESCRIPTOR, partition.DESCRIPTOR, kill.DESCRIPTOR, clock.DESCRIPTOR, failover.DESCRIPTOR,
)


@functools.cache
def faults() -> dict[str, FaultDescriptor]:
    table = {f.name: f for f in BUILTIN}
    # any other module of fencecheck/faults with a DESCRIPTOR: a new fault edits no existing file
    for f in discover(fencecheck.nemesis.faults, "DESCRIPTOR", FaultDescriptor):
        table.setdefault(f.name, f)
    for f in load_group("fencecheck.faults", FaultDescriptor):
        table[f.name] = f
    return table


def build(descriptor: FaultDescriptor, opts: FaultOptions) -> Fault:
    module, _, attr = descriptor.factory.partition(":")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise CatalogError(f"fault {descriptor.name}: cannot load {descriptor.factory}: {e}") \
            from None
    fault: Fault = cls(opts)
    return fault
