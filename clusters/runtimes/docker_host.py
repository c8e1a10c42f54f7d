"""The host side of the Docker runtime, what `fencecheck teardown` needs without a live run:
the names a run's Docker objects carry (`LABEL`, `network_name`, `bridge_name`,
`container_name`), the machine-wide pool of subnets (`take_subnet`), the SDK client
(`docker_client`), and the undo of the runtime's ledger records (`docker-container`,
`docker-network`, `docker-subnet`, `host-veth`, and `remote-chain`, which the ssh runtime's
records use too), registered with clusters/cleaner.py on import.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import logging
import os
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fencecheck.clusters.base import ClusterError
from fencecheck.clusters.cleaner import (
    check_run_id,
    kill_pids,
    register_undo,
)
from fencecheck.clusters.runtimes.netns import namespace_name

log = logging.getLogger(__name__)

LABEL = "fencecheck.run"


def network_name(run_id: str) -> str:
    return f"fc-{run_id}"


def bridge_name(run_id: str) -> str:
    return f"fc{run_id}-br"  # at most 13 characters: within IFNAMSIZ


def container_name(run_id: str, node: str) -> str:
    return namespace_name(run_id, node)


SUBNET_POOL = ipaddress.IPv4Network("10.96.0.0/12")  # 4,096 /24s, none of them 10.77.0.0/24
SUBNET_LOCK = Path("/run/fencecheck/docker-subnets.lock")


def take_subnet(client: Any, run_id: str,
                create: Callable[[ipaddress.IPv4Network], None]) -> ipaddress.IPv4Network:
    """A /24 of SUBNET_POOL that no Docker network on this machine holds, with the network
    made on it by `create`, under a machine-wide lock (flock), so two runs started at once never
    pick the same one. The search starts at a /24 derived from the run id, so runs spread out."""
    import docker.errors

    taken: set[ipaddress.IPv4Network | ipaddress.IPv6Network] = set()
    SUBNET_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(SUBNET_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for net in client.networks.list():
            for pool in (net.attrs.get("IPAM") or {}).get("Config") or []:
                with contextlib.suppress(KeyError, ValueError):
                    taken.add(ipaddress.ip_network(pool["Subnet"], strict=False))
        subnets = list(SUBNET_POOL.subnets(new_prefix=24))
        start = int(run_id, 36) % len(subnets)  # run ids are [0-9a-z] (check_run_id)
        for i in range(len(subnets)):
            net = subnets[(start + i) % len(subnets)]
            if any(net.overlaps(t) for t in taken):
                continue
            try:
                create(net)
            except docker.errors.APIError as e:  # held by something docker did not list
                if "overlap" not in str(e).lower():
                    raise
                continue
            return net
    raise ClusterError(f"docker: every /24 of {SUBNET_POOL} is held by another network")


def docker_client() -> Any:
    """A Docker SDK client, or ClusterError saying dockerd is not reachable."""
    import docker
    import docker.errors

    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except (docker.errors.DockerException, OSError) as e:
        raise ClusterError(
            f"docker: cannot reach dockerd ({e}); start it: setsid dockerd > /var/log/dockerd.log "
            "2>&1 < /dev/null & (Debian's docker.io; `fencecheck doctor` checks)"
        ) from None
    return client


def _run_of(rec: Mapping[str, Any]) -> str:
    return check_run_id(str(rec["run"]))


def _undo_containers(rec: Mapping[str, Any]) -> str | None:
    """Remove every container labelled with the record's run (by label, not by name: a crash
    between create and record cannot hide one). Force-removal kills what runs inside."""
    import docker.errors

    client = docker_client()
    gone = []
    for c in client.containers.list(all=True, filters={"label": f"{LABEL}={_run_of(rec)}"}):
        pid = int(c.attrs.get("State", {}).get("Pid") or 0)
        if pid > 0:
            kill_pids([p for p in netns_members(pid) if p != pid])
        with contextlib.suppress(docker.errors.NotFound):
            c.remove(force=True)
            gone.append(c.name)
    return f"containers {', '.join(gone)}" if gone else None


def netns_members(pid: int) -> list[int]:
    """Host pids in the network namespace of pid (daemons we started in its container)."""
    try:
        ns = os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return []
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}/ns/net").st_ino == ns:
                    out.append(int(entry))
    return out


def _undo_network(rec: Mapping[str, Any]) -> str | None:
    import docker.errors

    _undo_containers(rec)  # a network with endpoints cannot be removed
    client = docker_client()
    gone = []
    for n in client.networks.list(filters={"label": f"{LABEL}={_run_of(rec)}"}):
        with contextlib.suppress(docker.errors.NotFound):
            n.remove()
            gone.append(n.name)
    return f"network {', '.join(gone)}" if gone else None


def _undo_host_veth(rec: Mapping[str, Any]) -> str | None:
    name = str(rec["name"])
    if not Path(f"/sys/class/net/{name}").exists():
        return None  # it went with its namespace's peer
    p = subprocess.run(["ip", "link", "del", name], capture_output=True, text=True)
    if p.returncode != 0 and Path(f"/sys/class/net/{name}").exists():
        raise ClusterError(f"ip link del {name}: {p.stderr.strip()}")
    return f"veth {name}"


def undo_host_chain(rec: Mapping[str, Any]) -> str | None:
    """`remote-chain` (clusters/faults/partition.py): a chain on a node outside our namespaces. In a
    container it dies with the container; on an ssh host the ssh runtime removes it live; on
    this host (ssh client nodes share the controller's netns) it is removed here."""
    chain = str(rec["name"])
    if subprocess.run(["iptables", "-w", "-n", "-L", chain], capture_output=True).returncode:
        return None
    for args in (["-D", "INPUT", "-j", chain], ["-F", chain], ["-X", chain]):
        p = subprocess.run(["iptables", "-w", *args], capture_output=True, text=True)
        if p.returncode != 0 and args[0] != "-D":
            raise ClusterError(f"iptables {' '.join(args)}: {p.stderr.strip()}")
    return f"chain {chain} on this host"


register_undo("docker-container", _undo_containers)
register_undo("docker-network", _undo_network)
register_undo("docker-subnet", lambda rec: None)  # went with its network
register_undo("host-veth", _undo_host_veth)
register_undo("remote-chain", undo_host_chain)
