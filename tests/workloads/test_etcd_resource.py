"""EtcdResource against a real etcd cluster, with grants from the real EtcdClient: a write or
read guarded by a lock key that is gone is refused (StaleToken); with fencing off it is not."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fencecheck.clusters.services.etcd import EtcdService
from fencecheck.workloads.base import DefiniteFailure, Grant, StaleToken
from fencecheck.workloads.clients.etcd import EtcdClient
from fencecheck.workloads.resources.etcd import EtcdResource
from tests.backends import etcd_cluster, store_dir

__all__ = ["etcd_cluster", "store_dir"]


@pytest.fixture
def client(etcd_cluster: EtcdService) -> Iterator[EtcdClient]:
    c = EtcdClient({"endpoints": etcd_cluster.endpoints(), "op_timeout_s": 1.0})
    yield c
    c.close()


def _resource(etcd_cluster: EtcdService, fencing: bool) -> EtcdResource:
    return EtcdResource(
        {"endpoints": etcd_cluster.endpoints(), "op_timeout_s": 1.0, "fencing": fencing}
    )


def _two_grants(client: EtcdClient, lock: str) -> tuple[Grant, Grant]:
    """An old grant (released, so its key is gone) and the current one."""
    old = client.acquire(lock, 5000, 2.0)
    client.release(old)
    new = client.acquire(lock, 5000, 2.0)
    assert old.token is not None and new.token is not None and new.token > old.token
    return old, new


def test_fenced_rejects_the_stale_holder(etcd_cluster: EtcdService, client: EtcdClient) -> None:
    res = _resource(etcd_cluster, True)
    try:
        first = client.acquire("k1", 5000, 2.0)
        assert res.read("k1", first.token, "k1") is None  # never written
        res.write("k1", 1, first.token, "k1")
        assert res.read("k1", first.token, "k1") == 1
        client.release(first)  # the lock passes on; first's key is gone
        second = client.acquire("k1", 5000, 2.0)
        res.write("k1", 2, second.token, "k1")
        with pytest.raises(StaleToken):
            res.write("k1", 99, first.token, "k1")
        with pytest.raises(StaleToken):
            res.read("k1", first.token, "k1")
        with pytest.raises(StaleToken):  # a token that names no lock key at all
            res.write("k1", 99, (second.token or 0) + 1000, "k1")
        with pytest.raises(StaleToken):
            res.write("k1", 99, None, "k1")
        assert res.read("k1", second.token, "k1") == 2
        assert res.read("k1", None, "k1") == 2  # the observer's read needs no grant
        client.release(second)
    finally:
        res.close()


def test_fencing_off_accepts_the_stale_holder(
    etcd_cluster: EtcdService, client: EtcdClient
) -> None:
    old, new = _two_grants(client, "k2")
    res = _resource(etcd_cluster, False)
    try:
        res.write("k2", 5, new.token, "k2")
        res.write("k2", 7, old.token, "k2")  # the damage fencing would have stopped
        assert res.read("k2", old.token, "k2") == 7
    finally:
        res.close()
        client.release(new)


def test_unreachable_etcd_is_a_definite_failure() -> None:
    res = EtcdResource({"endpoints": ["127.0.44.20:2379"], "op_timeout_s": 0.5})
    try:
        with pytest.raises(DefiniteFailure) as e:
            res.write("k", 1, 5, "k")
        assert e.value.error == "connection-refused"
    finally:
        res.close()
