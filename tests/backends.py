"""Shared fixtures: real etcd, ZooKeeper, PostgreSQL, NATS, MariaDB and Hazelcast servers on
loopback addresses.

Import the fixtures you need into a test module (`from tests.backends import etcd_cluster`);
`etcd`/`zookeeper`/`nats` start other clusters on addresses of one's own, `running` any service.
Each module gets its own servers (module scope), torn down by a finally that also runs when
setup fails halfway. Addresses are distinct per backend (127.W.44.x etcd, 127.W.45.x ZooKeeper,
127.W.46.x PostgreSQL, 127.W.57-58.x NATS, 127.W.60.x MariaDB, 127.W.61-62.x Galera,
127.W.63-64.x Hazelcast,
127.W.66-67.x Consul) and per
test process (W = `tests.conftest.WORKER`, a slot 1..254 held machine-wide by this process), so
they never collide with other tests' servers on 127.0.0.1 nor with the same module's servers in
another xdist worker or another pytest session running beside it. `net(44)` is "127.W.44".
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager as ContextManager
from pathlib import Path
from typing import TypeVar

import pytest

from fencecheck.clusters.base import LockService, Remote
from fencecheck.clusters.runtimes.local import LocalRemote
from fencecheck.clusters.services import consul_build, hazelcast_build, nats_build
from fencecheck.clusters.services.consul import ConsulService
from fencecheck.clusters.services.etcd import ETCD, EtcdService
from fencecheck.clusters.services.hazelcast import HazelcastService
from fencecheck.clusters.services.mariadb import MARIADBD, MariadbService
from fencecheck.clusters.services.nats import NatsService
from fencecheck.clusters.services.postgres import BIN as PG_BIN
from fencecheck.clusters.services.postgres import PostgresService
from fencecheck.clusters.services.zookeeper import JAVA, ZookeeperService
from tests.conftest import WORKER, wait_for_late_builds


def net(octet: int) -> str:
    """This xdist worker's /24 for one backend's loopback servers: "127.<worker>.<octet>"."""
    return f"127.{WORKER}.{octet}"


def loopback_nodes(prefix: str, subnet: str, n: int) -> dict[str, LocalRemote]:
    names = [f"{prefix}{i}" for i in range(1, n + 1)]
    return {name: LocalRemote(name, f"{subnet}.{i + 2}") for i, name in enumerate(names)}


def need(path: str) -> None:
    if not os.path.exists(path):
        pytest.skip(f"{path} is not installed")


@pytest.fixture(scope="module")
def store_dir() -> Iterator[Path]:
    """A store the postgres user can traverse (pytest's tmp dirs are 0700 root)."""
    d = Path(tempfile.mkdtemp(prefix="fc-backends-"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


S = TypeVar("S", bound=LockService)


@contextlib.contextmanager
def running(svc: S, nodes: Mapping[str, Remote], store: Path) -> Iterator[S]:
    """The service set up on nodes; torn down on every exit path, a failed setup included."""
    try:
        svc.setup(nodes, store)
        yield svc
    finally:
        svc.teardown()


def etcd(n: int, prefix: str, subnet: str, store: Path) -> ContextManager[EtcdService]:
    """n etcd members <prefix>1..n at <subnet>.2..n+1; skips the test if etcd is missing."""
    need(ETCD)
    return running(EtcdService(n), loopback_nodes(prefix, subnet, n), store)


def zookeeper(n: int, prefix: str, subnet: str, store: Path) -> ContextManager[ZookeeperService]:
    """n ZooKeeper servers as `etcd` does it; skips the test if ZooKeeper is missing."""
    need(JAVA)
    need("/usr/share/java/zookeeper.jar")
    return running(ZookeeperService(n), loopback_nodes(prefix, subnet, n), store)


@pytest.fixture(scope="module")
def etcd_cluster(store_dir: Path) -> Iterator[EtcdService]:
    with etcd(3, "e", net(44), store_dir / "etcd") as svc:
        yield svc


@pytest.fixture(scope="module")
def zk_cluster(store_dir: Path) -> Iterator[ZookeeperService]:
    with zookeeper(3, "z", net(45), store_dir / "zk") as svc:
        yield svc


@pytest.fixture(scope="module")
def pg_server(store_dir: Path) -> Iterator[PostgresService]:
    need(f"{PG_BIN}/postgres")
    node = {"pg": LocalRemote("pg", f"{net(46)}.2")}
    with running(PostgresService(), node, store_dir / "pg") as svc:
        yield svc


def nats(n: int, prefix: str, subnet: str, store: Path, lease_ms: int = 2000,
         binary: str | None = None) -> ContextManager[NatsService]:
    """n nats-servers (JetStream, the KV bucket with TTL lease_ms) as `etcd` does it; by default
    the pinned build, whose absence fails the test (the README's test command builds it)."""
    if binary is None:
        try:
            binary = str(nats_build.binary())
        except nats_build.NotBuilt as e:
            pytest.fail(str(e))
    svc = NatsService(n, lease_ms=lease_ms, binary=binary)
    return running(svc, loopback_nodes(prefix, subnet, n), store)


@pytest.fixture(scope="module")
def nats_cluster(store_dir: Path) -> Iterator[NatsService]:
    with nats(3, "n", net(57), store_dir / "nats") as svc:
        yield svc


def consul(n: int, prefix: str, subnet: str, store: Path) -> ContextManager[ConsulService]:
    """n Consul servers as `etcd` does it, from the pinned build, whose absence fails the test
    (the README's test command builds it)."""
    return running(ConsulService(n, binary=consul_binary()), loopback_nodes(prefix, subnet, n),
                   store)


def consul_binary() -> str:
    """The pinned consul build, waited for while the test command still builds it beside the
    tests; its absence fails the test (the README's test command builds it)."""
    wait_for_late_builds()
    try:
        return str(consul_build.binary())
    except consul_build.NotBuilt as e:
        pytest.fail(str(e))


@pytest.fixture(scope="module")
def consul_cluster(store_dir: Path) -> Iterator[ConsulService]:
    with consul(3, "c", net(66), store_dir / "consul") as svc:
        yield svc


@pytest.fixture(scope="module")
def mariadb_server(store_dir: Path) -> Iterator[MariadbService]:
    need(MARIADBD)
    node = {"mdb": LocalRemote("mdb", f"{net(60)}.2")}
    with running(MariadbService(), node, store_dir / "mariadb") as svc:
        yield svc


def hazelcast(n: int, prefix: str, subnet: str, store: Path, lease_ms: int = 2000,
              cp_members: int = 3) -> ContextManager[HazelcastService]:
    """n Hazelcast members (cp_members of them CP members) as `etcd` does it; the pinned jar,
    whose absence fails the test (the README's test command builds it)."""
    try:
        hazelcast_build.jar()
    except hazelcast_build.NotBuilt as e:
        pytest.fail(str(e))
    svc = HazelcastService(n, lease_ms=lease_ms, cp_members=cp_members)
    return running(svc, loopback_nodes(prefix, subnet, n), store)
