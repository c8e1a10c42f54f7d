"""The checks and their violation kinds, each declared once by the module that implements it.

A check module says what it is with a module-level `CHECK = CheckSpec(...)`: its name, the
kinds of violation it reports (each with a one-line meaning and its role in an incident) and
how `analyze` runs it on a history's ops and the shared grant table. Every module of this
package that declares one is a check; so is any `CheckSpec` an installed package registers in
the entry-point group `fencecheck.checks`. Everything that lists checks or kinds (`analyze`,
the comparison's columns, the incident drawing, `fencecheck plugins`) reads them from here, so a
new check is one new module and no edited file.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from fencecheck.checker.base import CheckResult, Op
    from fencecheck.checker.grants import GrantTable

ENTRY_POINT_GROUP = "fencecheck.checks"
# A kind's role in an incident (checker/incidents.py): "grant", it follows from the stale grant
# it names (the incident is that grant's story); "write", likewise, and the later write of its
# ops did the damage (the report marks it); "none", no single grant explains it (it belongs to
# no incident).
IncidentRole = Literal["grant", "write", "none"]


class CheckRegistryError(Exception):
    """Two checks of one name or one kind, or a registered object that is not a CheckSpec."""


@dataclass(frozen=True, slots=True)
class KindSpec:
    name: str
    meaning: str  # one line, for the reports and `fencecheck plugins`
    incident: IncidentRole


@dataclass(frozen=True, slots=True)
class CheckSpec:
    """`run(ops, table)` is the check as `analyze` runs it; None for a check run only on
    request (the model checker, by `check --model`). `applies(table)`: whether the history has
    what the check judges (None: always run; a check that always runs reports a skip itself).
    `order`: position among the checks in results and reports (lower first)."""

    name: str
    kinds: tuple[KindSpec, ...]
    run: Callable[[Sequence[Op], GrantTable], CheckResult] | None = None
    applies: Callable[[GrantTable], bool] | None = None
    order: int = 100


@cache
def checks() -> tuple[CheckSpec, ...]:
    """Every check, built in (this package) or installed (entry points), in their order."""
    import fencecheck.checker as package

    found: list[CheckSpec] = []
    for mod in pkgutil.iter_modules(package.__path__):
        spec = getattr(importlib.import_module(f"{package.__name__}.{mod.name}"), "CHECK", None)
        if spec is not None:
            found.append(_spec(spec, f"{package.__name__}.{mod.name}"))
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.append(_spec(ep.load(), f"entry point {ep.name} = {ep.value}"))
    names = [c.name for c in found]
    kinds = [k.name for c in found for k in c.kinds]
    for what, seen in (("check", names), ("violation kind", kinds)):
        twice = sorted({n for n in seen if seen.count(n) > 1})
        if twice:
            raise CheckRegistryError(f"{what} declared twice: {', '.join(twice)}")
    return tuple(sorted(found, key=lambda c: (c.order, c.name)))


def _spec(obj: object, where: str) -> CheckSpec:
    if not isinstance(obj, CheckSpec):
        raise CheckRegistryError(f"{where}: CHECK is not a CheckSpec")
    return obj


def always_run() -> tuple[str, ...]:
    """The checks `analyze` runs on every history (the verdict's core)."""
    return tuple(c.name for c in checks() if c.run is not None and c.applies is None)


def kinds() -> tuple[KindSpec, ...]:
    return tuple(k for c in checks() for k in c.kinds)


def kind_names() -> tuple[str, ...]:
    return tuple(k.name for k in kinds())


def kind(name: str) -> KindSpec | None:
    return _kinds_by_name().get(name)


@cache
def _kinds_by_name() -> dict[str, KindSpec]:
    # read once per violation by the report: a lookup, not a scan of every check's kinds
    return {k.name: k for k in kinds()}
