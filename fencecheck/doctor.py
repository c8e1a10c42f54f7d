"""`fencecheck doctor`: what a run needs on this machine, and the command that fixes each gap."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

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
        from fencecheck.clusters.docker import docker_client
        from fencecheck.clusters.image import image_status

        ok, detail = image_status(docker_client())
    except Exception as e:
        return Finding("docker", True, f"dockerd {r.stdout.strip()}; image unknown: {e}")
    return Finding("docker node image", ok, f"dockerd {r.stdout.strip()}; {detail}",
                   None if ok else ".venv/bin/python -m fencecheck.clusters.image")


def diagnose() -> list[Finding]:
    out = [
        Finding("root", os.geteuid() == 0, f"uid {os.geteuid()}",
                "run fencecheck as root (sudo): namespaces and iptables need it"),
    ]
    out.append(_binary("iproute2", "ip", "iproute2"))
    out.append(_binary("iptables", "iptables", "iptables"))
    out.append(_binary("redis", "redis-server", "redis-server"))
    out.append(_binary("redis-sentinel", "redis-sentinel", "redis-sentinel"))
    out.append(_binary("etcd", "etcd", "etcd-server"))
    out.append(_binary("etcdctl", "etcdctl", "etcd-client"))
    out.append(_binary("java (ZooKeeper)", "java", "default-jre-headless"))
    zk = Path("/usr/share/java/zookeeper.jar")
    out.append(Finding("zookeeper", zk.exists(), str(zk) if zk.exists() else "jar not found",
                       "apt-get update && apt-get install -y zookeeper"))
    pg = Path("/usr/lib/postgresql/15/bin/postgres")
    out.append(Finding("postgresql", pg.exists(), str(pg) if pg.exists() else "not found",
                       "apt-get update && apt-get install -y postgresql"))
    out.append(_binary("C compiler (clock shim)", "cc", "gcc libc6-dev"))
    out.append(_optional(_binary("sshd (ssh runtime tests)", "sshd", "openssh-server")))
    out.append(_optional(_docker()))
    ns_ok = os.path.isdir("/run/netns") or os.geteuid() == 0
    out.append(Finding("network namespaces", ns_ok, "ip netns usable" if ns_ok else "no",
                       SETUP))
    return out
