"""Which extra of the fencecheck distribution provides a Python package, read from the installed
distribution's own metadata (`Requires-Dist: kazoo>=2.10; extra == "zookeeper"`), so that a
command or a run that needs a package a plain `pip install fencecheck` leaves out says which
extra to install. pyproject.toml is the one list; nothing here names a package.

Standard library only, like the rest of this package.
"""

from __future__ import annotations

import functools
import re
from importlib import metadata

DIST = "fencecheck"
# extras that are not a family of their own: named only when no other extra has the package
WIDE = ("all", "dev")
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRA = re.compile(r"""extra\s*==\s*['"]([^'"]+)['"]""")


def canonical(name: str) -> str:
    """A distribution or module name as the package index compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@functools.cache
def requirements() -> dict[str, tuple[str, ...]]:
    """Each package fencecheck requires (canonical name) -> the extras that bring it, in
    pyproject order; () for the core. Empty when fencecheck's metadata is not installed."""
    try:
        lines = metadata.requires(DIST) or []
    except metadata.PackageNotFoundError:
        return {}
    out: dict[str, list[str]] = {}
    for line in lines:
        name, extra = _NAME.match(line), _EXTRA.search(line)
        if name is None or canonical(name.group(1)) == DIST:
            continue
        extras = out.setdefault(canonical(name.group(1)), [])
        if extra is not None and extra.group(1) not in extras:
            extras.append(extra.group(1))
    return {k: tuple(v) for k, v in out.items()}


def extra_for(dist: str) -> str | None:
    """The extra to install for distribution `dist` (the first family that lists it), None
    when fencecheck does not require it or requires it always."""
    extras = requirements().get(canonical(dist), ())
    family = [e for e in extras if e not in WIDE] or list(extras)
    return family[0] if family else None


def dist_for_module(module: str) -> str | None:
    """The required distribution a top-level module name belongs to (redis_lock is
    python-redis-lock, nats is nats-py), matched by canonical name; None if none matches."""
    top = canonical(module.split(".")[0])
    for dist in requirements():
        if top in (dist, dist.removeprefix("python-"), dist.removesuffix("-py")):
            return dist
    return None


def install_hint(dist: str | None) -> str:
    """The pip command that brings `dist` (the extra that has it, else all of them)."""
    extra = extra_for(dist) if dist is not None else None
    return f"pip install 'fencecheck[{extra or 'all'}]'"


def is_installed(dist: str) -> bool:
    try:
        metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        return False
    return True


def missing_module_message(module: str, what: str) -> str:
    """One line for a ModuleNotFoundError of `module` met by `what` (a command, a client)."""
    dist = dist_for_module(module)
    package = dist or module.split(".")[0]
    return (f"{what} needs the Python package {package}, which this install lacks: "
            f"{install_hint(dist)}")
