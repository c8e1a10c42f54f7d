"""`fencecheck build [NAME ...]`: build the programs fencecheck runs but does not ship built: the
third-party lock clients in other languages (a `Program` in their descriptors) and the pinned
servers (a descriptor's `server_build`: kube-apiserver, nats-server) and the one-node cluster's
Kubernetes programs (`TOOL_BUILDS`: kube-node), each into the machine's
build cache by source hash (fencecheck.toolchain.cache: an unchanged one is a no-op).

Everything comes from the installed package, so it works from a pip install as from a checkout;
`scripts/build-clients.sh` installs the toolchains with apt and runs this. `--dry-run` names
every recipe, what it is built from, with which toolchain, where it goes and whether it is built.
A missing toolchain is refused before anything is built, naming the package that provides it.
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Annotated

import typer

from fencecheck.cli.group import console, shown
from fencecheck.descriptors import catalog
from fencecheck.toolchain import cache, tools

out = console()
err = console(stderr=True, soft_wrap=True)
BAD_INPUT = 3


@dataclass(frozen=True, slots=True)
class Recipe:
    """One program `fencecheck build` makes: a shipped client or a pinned server."""

    name: str
    kind: str  # "client" or "server"
    toolchain: str  # a key of fencecheck.toolchain.tools.TOOLCHAINS
    source: str  # what it is built from, in words
    folder: Callable[[], Path]  # where it lands in the build cache
    steps: Callable[[Path], list[list[str]]]  # the commands, run in the build folder
    build: Callable[[], tuple[Path, bool]]  # build unless cached: (folder or binary, built)
    used_by: str  # what needs it: "client-go on kubernetes", "backend nats"
    default: bool = True  # built by `fencecheck build` with no names (else only when named)
    # A build of many CPU minutes that the test command runs beside the tests (whose tests wait
    # for it), not before them: its module's LATE = True.
    late: bool = False


# Pinned builds no backend runs: (module, what needs it). Built only when named: the kube-node
# build is tens of minutes of compiling on a busy 2-core machine, for a benchmark and a user's
# local try of the Job, not for any run or test.
TOOL_BUILDS = (("fencecheck.clusters.kube.node_build", "fencecheck kube (the one-node cluster)"),)


def _server_module(spec: str) -> ModuleType:
    return importlib.import_module(spec)


def recipes() -> dict[str, Recipe]:
    """Every recipe, by name: the shipped clients in descriptor order, then the servers (those
    whose module says LAST after the others)."""
    from fencecheck.workloads.clients import build as clients

    backends = catalog.backends().values()
    used: dict[str, list[str]] = {}
    for b in backends:
        for c in b.clients:
            if c.program is not None:
                used.setdefault(c.name, []).append(b.name)
    out: dict[str, Recipe] = {}
    for name, b in clients.BUILDS.items():
        out[name] = Recipe(
            name, "client", b.toolchain, str(clients.HERE / b.source),
            functools.partial(clients.build_dir, name), b.steps,
            functools.partial(clients.build, name),
            f"client {name} on {', '.join(used.get(name, ['?']))}")
    servers = [(b.name, _server_module(b.server_build)) for b in backends
               if b.server_build is not None]
    for backend, m in sorted(servers, key=lambda s: bool(getattr(s[1], "LAST", False))):
        out[m.NAME] = Recipe(m.NAME, "server", m.TOOLCHAIN, m.source(), m.build_dir, m.steps,
                             m.build, f"backend {backend}",
                             late=bool(getattr(m, "LATE", False)))
    for spec, used_by in TOOL_BUILDS:
        m = _server_module(spec)
        out[m.NAME] = Recipe(m.NAME, "server", m.TOOLCHAIN, m.source(), m.build_dir, m.steps,
                             m.build, used_by, default=False)
    return out


def _version_recipe(name: str) -> Recipe | None:
    """NAME@VERSION: a shipped client built against another release of its pinned dependency
    (its descriptor's Program.versions), built only when named."""
    from fencecheck.workloads.base import WorkloadError
    from fencecheck.workloads.clients import build as clients

    base, _, version = name.partition("@")
    try:
        if not version or clients.version_build(base, version) != name:
            return None
        b = clients._get(name)
    except WorkloadError:
        return None
    return Recipe(name, "client", b.toolchain, str(clients.HERE / b.source),
                  functools.partial(clients.build_dir, name), b.steps,
                  functools.partial(clients.build, name), f"client {base}, version {version}")


def _pick(names: list[str], known: dict[str, Recipe], every: bool = False) -> list[Recipe]:
    """The recipes named; with no names, those built by default (or all, with `every`)."""
    known = {**known, **{n: r for n in names if n not in known
                         if (r := _version_recipe(n)) is not None}}
    unknown = [n for n in names if n not in known]
    if unknown:
        err.print(f"[bold red]error:[/] fencecheck build: unknown {', '.join(map(shown, unknown))}"
                  f" (known: {', '.join(known)})")
        raise typer.Exit(BAD_INPUT)
    if names:
        return [known[n] for n in dict.fromkeys(names)]
    return [r for r in known.values() if every or r.default]


def _dry_run(chosen: list[Recipe]) -> None:
    for r in chosen:
        folder = r.folder()
        state = "built" if cache.is_built(folder) else "not built"
        lacking = [t.what for t in tools.missing(r.toolchain)]
        when = "" if r.default else ", only when named"
        out.print(f"{r.name} ({r.used_by}{when}): {r.toolchain}, from {shown(r.source)}",
                  soft_wrap=True)
        out.print(f"  into {shown(folder)}: {state}", soft_wrap=True)
        if lacking:
            out.print(f"  toolchain missing: {', '.join(lacking)}", soft_wrap=True)
        for argv in r.steps(folder):
            out.print(f"  $ {shown(' '.join(argv))}", soft_wrap=True)


def _refuse_missing_toolchains(chosen: list[Recipe]) -> None:
    lacking: dict[str, tuple[tools.Tool, list[str]]] = {}
    for r in chosen:
        for t in tools.missing(r.toolchain):
            lacking.setdefault(t.what, (t, []))[1].append(r.name)
    if not lacking:
        return
    for what, (t, names) in lacking.items():
        err.print(f"[bold red]error:[/] fencecheck build: {what} not found (needed by "
                  f"{', '.join(names)}); install it: apt-get install -y {t.package}")
    raise typer.Exit(BAD_INPUT)


def build(
    names: Annotated[list[str] | None, typer.Argument(
        help="what to build (default: everything but kube-node, which is built only when "
             "named; --dry-run lists the names)")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="name every recipe, its toolchain, commands and cache folder; "
                          "build nothing")] = False,
    late: Annotated[str, typer.Option(
        "--late", help="with: every build (the default); without: not the builds of many CPU "
                       "minutes (consul) that the test command runs beside its tests; only: "
                       "just those")] = "with",
) -> None:
    """Build the lock clients in other languages and the pinned servers (cached by source)."""
    from fencecheck.clusters.base import ClusterError
    from fencecheck.workloads.base import WorkloadError

    if late not in ("with", "without", "only"):
        err.print(f"[bold red]error:[/] fencecheck build: --late {shown(late)}: expected "
                  "with, without or only")
        raise typer.Exit(BAD_INPUT)
    chosen = [r for r in _pick(names or [], recipes(), every=dry_run)
              if late == "with" or r.late == (late == "only")]
    if dry_run:
        _dry_run(chosen)
        return
    _refuse_missing_toolchains(chosen)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    for r in chosen:
        t = time.monotonic()
        try:
            path, built = r.build()
        except (WorkloadError, ClusterError, OSError) as e:
            err.print(f"[bold red]error:[/] fencecheck build: {shown(e)}")
            raise typer.Exit(BAD_INPUT) from None
        out.print(shown(cache.summary(r.name, built, t, path)), soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command()(build)
