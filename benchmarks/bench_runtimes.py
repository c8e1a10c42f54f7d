"""Cluster-ready time per runtime: nodes made (`Runtime.setup`) plus the lock service up
(`LockService.setup` returns once it serves), for redis 1, etcd 3 and zookeeper 3 nodes on the
netns, docker (node image already built) and ssh runtimes (sshd in namespaces on this host, as in
tests/clusters/test_ssh.py). Must run as root with dockerd running.

    .venv/bin/python benchmarks/bench_runtimes.py --repeat 3 [--runtimes netns,docker,ssh]

Prints a Markdown table of median seconds (and docker / netns). The image build from nothing is
measured apart: `docker rmi` the fencecheck images, then
`time python -m fencecheck.clusters.runtimes.image`.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fencecheck.clusters.runtimes.netns import NetnsRuntime
from fencecheck.clusters.services.etcd import EtcdService
from fencecheck.clusters.services.redis import RedisService
from fencecheck.clusters.services.zookeeper import ZookeeperService

SERVICES: dict[str, tuple[Callable[..., Any], int]] = {
    "redis": (RedisService, 1), "etcd": (EtcdService, 3), "zookeeper": (ZookeeperService, 3),
}


def ready_s(make_runtime: Callable[[str, Path], Any], backend: str, tmp: Path) -> float:
    cls, n = SERVICES[backend]
    rid = secrets.token_hex(3)
    store = tmp / rid
    t0 = time.monotonic()
    rt = make_runtime(rid, store)
    service = cls(ledger=rt.ledger)
    try:
        cluster = rt.setup([f"n{i + 1}" for i in range(n)], ["c1"])
        service.setup(dict(cluster.servers), store)
        return time.monotonic() - t0
    finally:
        service.teardown()
        rt.teardown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--runtimes", default="netns,docker,ssh")
    args = ap.parse_args()
    runtimes = args.runtimes.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="fc-bench-rt-"))
    makers: dict[str, Callable[[str, Path], Any]] = {
        "netns": lambda rid, store: NetnsRuntime(rid, store, "10.97.0.0/24"),
    }
    closers: list[Callable[[], None]] = []
    if "docker" in runtimes:
        from fencecheck.clusters.runtimes.docker import DockerRuntime
        from fencecheck.clusters.runtimes.docker_host import docker_client
        from fencecheck.clusters.runtimes.image import ensure_image

        image = ensure_image(docker_client())
        makers["docker"] = lambda rid, store: DockerRuntime(rid, store, "10.98.0.0/24",
                                                            image=image)
    if "ssh" in runtimes:
        from tests.clusters.test_ssh import SshdHosts

        hosts = SshdHosts(tmp / "sshd", 3)
        hosts.start()
        closers.append(hosts.close)
        makers["ssh"] = lambda rid, store: hosts.runtime(rid, store)
    try:
        rows = {}
        for backend in SERVICES:
            rows[backend] = {rt: statistics.median(ready_s(makers[rt], backend, tmp)
                                                   for _ in range(args.repeat))
                             for rt in runtimes}
    finally:
        for close in closers:
            close()
    ratio = "docker" in runtimes and "netns" in runtimes
    print("| service | " + " | ".join(runtimes) + (" | docker/netns |" if ratio else " |"))
    print("|---" * (len(runtimes) + 1 + ratio) + "|")
    for backend, r in rows.items():
        cells = " | ".join(f"{r[rt]:.2f} s" for rt in runtimes)
        extra = f" | {r['docker'] / r['netns']:.2f}x |" if ratio else " |"
        print(f"| {backend} {SERVICES[backend][1]} | {cells}{extra}")


if __name__ == "__main__":
    main()
