"""The careless clients (workloads/clients/careless.py) against real servers: each careless step
does
what it says to *another* holder's lock, and records the evidence the checker names."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from fencecheck.clusters.services.etcd import EtcdService
from fencecheck.workloads.base import DefiniteFailure, WorkloadError
from fencecheck.workloads.clients.careless import (
    CarelessEtcdClient,
    CarelessSetnxClient,
    careless_steps,
)
from fencecheck.workloads.clients.redis import SetnxClient
from tests.backends import etcd_cluster, store_dir
from tests.workloads.conftest import Server

__all__ = ["etcd_cluster", "store_dir"]


def options(server: Server, **extra: Any) -> dict[str, Any]:
    return {"endpoints": [server.address], "op_timeout_s": 2.0, **extra}


def name() -> str:
    return f"lock-{uuid.uuid4().hex[:8]}"


def test_steps_default_to_all_and_unknown_ones_are_refused() -> None:
    assert careless_steps({}) == {"release-without-token", "renew-without-owner",
                                  "work-after-failed-renew"}
    assert careless_steps({"careless": "renew-without-owner"}) == {"renew-without-owner"}
    with pytest.raises(WorkloadError, match="oops"):
        careless_steps({"careless": "release-without-token,oops"})


def test_a_careless_release_deletes_the_next_holders_lock(redis_server: Server) -> None:
    stale = CarelessSetnxClient(options(redis_server))
    # a careful holder (no step skipped) that still tags its lock with its token
    strict = CarelessSetnxClient(options(redis_server, careless=""))
    try:
        lock = name()
        old = stale.acquire(lock, 100, 1.0)
        new = strict.acquire(lock, 10_000, 2.0)  # after the old lease ran out
        assert stale.release(old) == {"deleted_token": new.token}
        # the lock is free although its holder never released it
        third = strict.acquire(lock, 10_000, 0.0)
        assert third.token == (new.token or 0) + 1
    finally:
        stale.close()
        strict.close()


def test_a_careless_renew_extends_another_holders_lock(redis_server: Server) -> None:
    stale = CarelessSetnxClient(options(redis_server, careless="renew-without-owner"))
    strict = CarelessSetnxClient(options(redis_server, careless=""))
    try:
        lock = name()
        old = stale.acquire(lock, 100, 1.0)
        new = strict.acquire(lock, 10_000, 2.0)
        renewed = stale.renew(old, 1000)
        assert renewed.evidence == {"extended_token": new.token}
        # its release is still the strict one: another's lock is refused
        with pytest.raises(DefiniteFailure):
            stale.release(old)
    finally:
        stale.close()
        strict.close()


def test_a_strict_renew_of_the_careless_client_still_checks_the_owner(
        redis_server: Server) -> None:
    stale = CarelessSetnxClient(options(redis_server, careless="release-without-token"))
    strict = SetnxClient(options(redis_server))
    try:
        lock = name()
        old = stale.acquire(lock, 100, 1.0)
        strict.acquire(lock, 10_000, 2.0)
        with pytest.raises(DefiniteFailure):
            stale.renew(old, 1000)
    finally:
        stale.close()
        strict.close()


def test_etcd_careless_release_deletes_the_holders_key(etcd_cluster: EtcdService) -> None:
    opts = {"endpoints": etcd_cluster.endpoints(), "op_timeout_s": 2.0}
    careless = CarelessEtcdClient(opts)
    holder = CarelessEtcdClient({**opts, "careless": ""})
    try:
        lock = name()
        mine = careless.acquire(lock, 2000, 2.0)
        careless.release(mine)  # deletes its own key: the lock is free
        theirs = holder.acquire(lock, 5000, 5.0)
        assert careless.release(mine) == {"deleted_token": theirs.token}
        # the holder's key is gone: a third client is granted at once
        third = holder.acquire(lock, 5000, 1.0)
        assert (third.token or 0) > (theirs.token or 0)
    finally:
        careless.close()
        holder.close()
