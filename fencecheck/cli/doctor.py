"""`fencecheck doctor`: what a run needs on this machine, and the command that fixes each gap.

Required: root, iproute2, iptables and what the backends, resources and faults declare (`Need`s).
Optional, each with what its absence disables: the Python packages of the extras, the build
toolchains (Go, Maven and the JDK, Node.js and npm, Debian's Curator jars), every program
`fencecheck build` makes (the lock clients in other languages, kube-apiserver, nats-server), sshd
and dockerd. No hint assumes a checkout: each names a package, `pip install`, or a fencecheck
command.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fencecheck.descriptors.base import Need
from fencecheck.toolchain import cache, tools


@dataclass(frozen=True, slots=True)
class Finding:
    what: str
    ok: bool
    detail: str
    fix: str | None = None
    optional: bool = False  # needed only by some runtimes or tests


def _binary(what: str, name: str, package: str) -> Finding:
    path = tools.which(name)  # PATH, then /usr/local/go/bin, /usr/sbin, /sbin
    if path:
        return Finding(what, True, path)
    return Finding(what, False, f"{name} not found",
                   f"apt-get update && apt-get install -y {package}")


def _optional(f: Finding) -> Finding:
    return Finding(f.what, f.ok, f.detail, f.fix, optional=True)


def _docker() -> Finding:
    if not tools.which("dockerd"):
        return Finding("docker", False, "dockerd not installed (only for --runtime docker)",
                       "apt-get update && apt-get install -y docker.io")
    try:
        r = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                           capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        r = None
    if r is None or r.returncode != 0:
        return Finding("docker", False, "dockerd is not running (only for --runtime docker)",
                       "setsid dockerd > /var/log/dockerd.log 2>&1 < /dev/null &")
    try:
        from fencecheck.clusters.runtimes.docker_host import docker_client
        from fencecheck.clusters.runtimes.image import image_status

        ok, detail = image_status(docker_client())
    except Exception as e:
        return Finding("docker", True, f"dockerd {r.stdout.strip()}; image unknown: {e}")
    return Finding("docker node image", ok, f"dockerd {r.stdout.strip()}; {detail}",
                   None if ok else f"{sys.executable} -m fencecheck.clusters.runtimes.image")


def needs() -> list[Need]:
    """What the backends, resources and faults declare, each once, in catalog order. The faults
    are read only where the `run` extra is installed: their options are pydantic models, and
    without it no run starts (python_packages() says so), so what they need does not matter."""
    from fencecheck.descriptors import catalog

    groups: list[Iterable[Any]] = [catalog.backends().values(), catalog.resources().values()]
    try:
        from fencecheck.nemesis.faults.registry import faults
    except ModuleNotFoundError as e:
        if e.name is None or e.name.split(".")[0] == "fencecheck":
            raise
    else:
        groups.append(faults().values())
    found: dict[str, Need] = {}
    for group in groups:
        for d in group:
            for n in d.needs:
                found.setdefault(n.what, n)
    return list(found.values())


def _need(n: Need) -> Finding:
    if n.dist is not None:
        from fencecheck.descriptors.extras import install_hint, is_installed

        ok = is_installed(n.dist)
        return Finding(n.what, ok, "installed" if ok else f"Python package {n.dist} not installed",
                       None if ok else install_hint(n.dist), optional=True)
    if n.binary is not None:
        return _binary(n.what, n.binary, n.package)
    path = Path(n.path or "")
    ok = path.exists()
    return Finding(n.what, ok, str(path) if ok else f"{path} not found",
                   None if ok else f"apt-get update && apt-get install -y {n.package}")


def diagnose() -> list[Finding]:
    out = [
        Finding("root", os.geteuid() == 0, f"uid {os.geteuid()}",
                "run fencecheck as root (sudo): namespaces and iptables need it"),
    ]
    out.append(_binary("iproute2", "ip", "iproute2"))
    out.append(_binary("iptables", "iptables", "iptables"))
    out.extend(_need(n) for n in needs())
    out.append(_optional(_binary("sshd (ssh runtime tests)", "sshd", "openssh-server")))
    out.append(_optional(_docker()))
    ns_ok = os.path.isdir("/run/netns") or os.geteuid() == 0
    out.append(Finding("network namespaces", ns_ok, "ip netns usable" if ns_ok else "no",
                       "run fencecheck as root (sudo)"))
    out.extend(python_packages())
    out.extend(toolchains())
    out.extend(builds())
    return out


def python_packages() -> list[Finding]:
    """The extras' Python packages: the `run` extra's (without them no run starts), then each
    lock client's library with the clients it disables."""
    from fencecheck.descriptors import catalog
    from fencecheck.descriptors.extras import install_hint, is_installed, requirements

    disables: dict[str, str] = {
        dist: "fencecheck run, matrix and shrink" for dist, extras in requirements().items()
        if "run" in extras}
    users: dict[str, list[str]] = {}
    for b in catalog.backends().values():
        for c in b.clients:
            if c.dist is not None and c.name not in users.get(c.dist, []):
                users.setdefault(c.dist, []).append(c.name)
    for dist, clients in users.items():
        disables.setdefault(dist, f"client {', '.join(clients)}")
    out = []
    for dist, what in disables.items():
        ok = is_installed(dist)
        out.append(Finding(f"Python package {dist}", ok,
                           "installed" if ok else f"not installed: disables {what}",
                           None if ok else install_hint(dist), optional=True))
    return out


def toolchains() -> list[Finding]:
    """Each build toolchain's programs, with the builds their absence disables."""
    from fencecheck.cli.build import recipes

    needed_by: dict[str, list[str]] = {}
    for r in recipes().values():
        needed_by.setdefault(r.toolchain, []).append(r.name)
    seen: dict[tools.Tool, list[str]] = {}
    for key, names in needed_by.items():
        for t in tools.TOOLCHAINS[key]:
            seen.setdefault(t, []).extend(n for n in names if n not in seen.get(t, []))
    out = []
    for t, names in seen.items():
        where = tools.found(t)
        detail = where or f"not found: disables building {', '.join(names)}"
        out.append(Finding(t.what, where is not None, detail,
                           None if where else f"apt-get update && apt-get install -y {t.package}",
                           optional=True))
    return out


def builds() -> list[Finding]:
    """Every program `fencecheck build` makes: built (where), or what cannot run without it."""
    from fencecheck.cli.build import recipes

    out = []
    for r in recipes().values():
        folder = r.folder()
        ok = cache.is_built(folder)
        detail = str(folder) if ok else f"not built: {r.used_by} cannot run"
        out.append(Finding(f"build {r.name}", ok, detail,
                           None if ok else f"fencecheck build {r.name}", optional=True))
    return out
