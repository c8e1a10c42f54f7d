"""`fencecheck doctor`: what a run needs on this machine, and the command that fixes each gap."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from fencecheck.descriptors.base import Need

SETUP = "bash scripts/setup.sh"


@dataclass(frozen=True, slots=True)
class Finding:
    what: str
    ok: bool
    detail: str
    fix: str | None = None
    optional: bool = False  # needed only by some runtimes or tests


def _binary(what: str, name: str, package: str) -> Finding:
    path = shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/sbin/{name}") if os.path.exists(p)), None
    )
    if path:
        return Finding(what, True, path)
    return Finding(what, False, f"{name} not found",
                   f"apt-get update && apt-get install -y {package}")


def _optional(f: Finding) -> Finding:
    return Finding(f.what, f.ok, f.detail, f.fix, optional=True)


def _docker() -> Finding:
    if not shutil.which("dockerd"):
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
                   None if ok else ".venv/bin/python -m fencecheck.clusters.runtimes.image")


def needs() -> list[Need]:
    """What the backends, resources and faults declare, each once, in catalog order."""
    from fencecheck.descriptors import catalog
    from fencecheck.nemesis.faults.registry import faults

    found: dict[str, Need] = {}
    for group in (catalog.backends().values(), catalog.resources().values(), faults().values()):
        for d in group:
            for n in d.needs:
                found.setdefault(n.what, n)
    return list(found.values())


def _need(n: Need) -> Finding:
    if n.binary is not None:
        return _binary(n.what, n.binary, n.package)
    path = Path(n.path or "")
    ok = path.exists()
    return Finding(n.what, ok, str(path) if ok else f"{path} not found",
                   None if ok else f"apt-get update && apt-get install -y {n.package}")


def server_builds() -> list[Finding]:
    """Each server binary a backend builds here (its descriptor's `server_build`): its path, or
    the command that builds it. Optional: only that backend needs it."""
    from fencecheck.descriptors import catalog

    out: list[Finding] = []
    for b in catalog.backends().values():
        if b.server_build is None or b.preflight is None:
            continue
        what = f"{b.server_build.name} (--backend {b.name})"
        module, _, function = b.preflight.partition(":")
        try:
            path = getattr(importlib.import_module(module), function)()
        except Exception as e:  # NotBuilt, or a builder that cannot say: report, do not crash
            out.append(Finding(what, False, str(e),
                               f"bash scripts/build-clients.sh {b.server_build.name}",
                               optional=True))
        else:
            out.append(Finding(what, True, str(path)))
    return out


def diagnose() -> list[Finding]:
    out = [
        Finding("root", os.geteuid() == 0, f"uid {os.geteuid()}",
                "run fencecheck as root (sudo): namespaces and iptables need it"),
    ]
    out.append(_binary("iproute2", "ip", "iproute2"))
    out.append(_binary("iptables", "iptables", "iptables"))
    out.extend(_need(n) for n in needs())
    out.extend(server_builds())
    out.append(_optional(_binary("sshd (ssh runtime tests)", "sshd", "openssh-server")))
    out.append(_optional(_docker()))
    ns_ok = os.path.isdir("/run/netns") or os.geteuid() == 0
    out.append(Finding("network namespaces", ns_ok, "ip netns usable" if ns_ok else "no",
                       SETUP))
    return out
