"""Shared fixtures: real etcd, ZooKeeper and PostgreSQL servers on loopback addresses.

Import the fixtures you need into a test module (`from tests.backends import etcd_cluster`).
Each module gets its own servers (module scope), torn down by a finally that also runs when
setup fails halfway. Addresses are distinct per backend (127.0.44.x etcd, 127.0.45.x ZooKeeper,
127.0.46.x PostgreSQL) so they never collide with other tests' servers on 127.0.0.1.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusters.etcd import ETCD, EtcdService
from clusters.local import LocalRemote
from clusters.postgres import BIN as PG_BIN
from clusters.postgres import PostgresService
from clusters.zookeeper import JAVA, ZookeeperService


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


@pytest.fixture(scope="module")
def etcd_cluster(store_dir: Path) -> Iterator[EtcdService]:
    need(ETCD)
    svc = EtcdService(3)
    try:
        svc.setup(loopback_nodes("e", "127.0.44", 3), store_dir / "etcd")
        yield svc
    finally:
        svc.teardown()


@pytest.fixture(scope="module")
def zk_cluster(store_dir: Path) -> Iterator[ZookeeperService]:
    need(JAVA)
    need("/usr/share/java/zookeeper.jar")
    svc = ZookeeperService(3)
    try:
        svc.setup(loopback_nodes("z", "127.0.45", 3), store_dir / "zk")
        yield svc
    finally:
        svc.teardown()


@pytest.fixture(scope="module")
def pg_server(store_dir: Path) -> Iterator[PostgresService]:
    need(f"{PG_BIN}/postgres")
    svc = PostgresService()
    try:
        svc.setup({"pg": LocalRemote("pg", "127.0.46.2")}, store_dir / "pg")
        yield svc
    finally:
        svc.teardown()
