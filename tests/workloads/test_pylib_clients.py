"""The PostgreSQL advisory-lock clients (workloads/clients/pg_advisory.py) and the Python lock
libraries (workloads/clients/pylib.py) against real servers: they exclude each other, their
renewers keep a lock past its expiry, a refusal is definite, and the server's own session
timeouts are what ends an advisory lock."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from fencecheck.clusters.faults.grudges import client_isolate
from fencecheck.clusters.services.etcd import EtcdService
from fencecheck.clusters.services.postgres import PostgresService
from fencecheck.workloads.base import DefiniteFailure, LockClient
from fencecheck.workloads.clients.pg_advisory import (
    PgAdvisoryClient,
    PgAdvisoryCounterClient,
    lock_key,
    session_settings,
)
from fencecheck.workloads.clients.pylib import (
    AioredlockClient,
    Etcd3Client,
    PythonRedisLockClient,
)
from tests.backends import etcd_cluster, pg_server, store_dir
from tests.workloads.conftest import Server
from tests.workloads.lockchecks import assert_strictly_increasing, assert_waits_then_times_out

__all__ = ["etcd_cluster", "pg_server", "store_dir"]


def name() -> str:
    return f"lock-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def closing() -> Iterator[list[LockClient]]:
    made: list[LockClient] = []
    yield made
    for c in made:
        c.close()


def pg(server: PostgresService, closing: list[LockClient], counter: bool = False,
       **extra: Any) -> PgAdvisoryClient:
    cls = PgAdvisoryCounterClient if counter else PgAdvisoryClient
    c = cls({"endpoints": server.endpoints(), "op_timeout_s": 2.0, **extra})
    closing.append(c)
    return c


# -- pure parts


def test_lock_key_is_a_stable_signed_64_bit_number() -> None:
    assert lock_key("lock-0") == lock_key("lock-0") != lock_key("lock-1")
    assert all(-(2**63) <= lock_key(f"l{i}") < 2**63 for i in range(100))
    assert any(lock_key(f"l{i}") < 0 for i in range(100))  # the signed half is used too


def test_session_timeouts_never_drop_a_session_sooner_than_the_lease() -> None:
    s = session_settings(1500, idle_timeout=False)
    assert int(s["tcp_keepalives_idle"]) * 1000 >= 1500
    assert s["tcp_user_timeout"] == "1500" and s["idle_session_timeout"] == "0"
    assert session_settings(1500, idle_timeout=True)["idle_session_timeout"] == "1500"


def test_client_isolate_cuts_the_holder_off_from_postgres_only() -> None:
    # The postgres-advisory layout: one server node n1, the resource on r1.
    grudge = client_isolate("c2", ["n1"], "r1")
    assert grudge == {"c2": frozenset({"n1"}), "n1": frozenset({"c2"})}


# -- PostgreSQL advisory locks


def test_advisory_lock_excludes_until_released(pg_server: PostgresService,
                                               closing: list[LockClient]) -> None:
    a, b = pg(pg_server, closing), pg(pg_server, closing)
    lock = name()
    g = a.acquire(lock, 1000, 1.0)
    assert g.token is None
    assert_waits_then_times_out(b, lock, 1000)
    a.release(g)
    b.release(b.acquire(lock, 1000, 1.0))
    with pytest.raises(DefiniteFailure) as e:
        a.release(g)  # no longer held by a's session
    assert e.value.error == "not-owner"


def test_counter_tokens_strictly_increase(pg_server: PostgresService,
                                          closing: list[LockClient]) -> None:
    a, b = pg(pg_server, closing, counter=True), pg(pg_server, closing, counter=True)
    lock, tokens = name(), []
    for client in (a, b, a, a, b):
        g = client.acquire(lock, 1000, 1.0)
        tokens.append(g.token)
        client.release(g)
    assert_strictly_increasing(tokens)
    assert tokens[0] == 1


def test_the_session_carries_the_lease_as_server_timeouts(pg_server: PostgresService,
                                                          closing: list[LockClient]) -> None:
    a = pg(pg_server, closing, idle_session_timeout=True)
    a.acquire(name(), 2500, 1.0)
    assert a.conn is not None
    shown = {k: a.conn.execute(f"SHOW {k}").fetchone()[0]  # type: ignore[index]
             for k in ("idle_session_timeout", "tcp_keepalives_idle", "tcp_user_timeout")}
    assert shown == {"idle_session_timeout": "2500ms", "tcp_keepalives_idle": "3",
                     "tcp_user_timeout": "2500"}  # in ms, shown without a unit


def test_an_idle_session_loses_its_lock_and_renew_says_so(pg_server: PostgresService,
                                                          closing: list[LockClient]) -> None:
    a = pg(pg_server, closing, idle_session_timeout=True)
    b = pg(pg_server, closing)
    lock = name()
    g = a.renew(a.acquire(lock, 500, 1.0), 500)  # held: renew confirms it
    time.sleep(1.2)  # a says nothing for more than a lease: the server ends its session
    b.release(b.acquire(lock, 1000, 1.0))
    with pytest.raises(DefiniteFailure) as e:
        a.renew(g, 500)
    assert e.value.error == "session-lost"


def test_a_terminated_session_frees_the_lock(pg_server: PostgresService,
                                             closing: list[LockClient]) -> None:
    a, b = pg(pg_server, closing), pg(pg_server, closing)
    lock = name()
    g = a.acquire(lock, 1000, 1.0)
    assert a.conn is not None
    pid = a.conn.info.backend_pid
    with psycopg.connect(pg_server.dsn(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    b.acquire(lock, 1000, 2.0)
    with pytest.raises(DefiniteFailure):
        a.renew(g, 1000)


def test_an_unreachable_server_is_a_definite_acquire_failure(closing: list[LockClient]) -> None:
    c = PgAdvisoryClient({"endpoints": ["127.0.46.9:1"], "op_timeout_s": 1.0})
    closing.append(c)
    with pytest.raises(DefiniteFailure) as e:
        c.acquire(name(), 1000, 0.5)
    assert e.value.error == "connection-refused"


# -- python-redis-lock and aioredlock on one redis-server


def redis_opts(server: Server) -> dict[str, Any]:
    return {"endpoints": [server.address], "op_timeout_s": 1.0}


@pytest.mark.parametrize("cls", [PythonRedisLockClient, AioredlockClient])
def test_library_renewer_keeps_the_lock_past_its_expiry(redis_server: Server, cls: Any,
                                                        closing: list[LockClient]) -> None:
    a, b = cls(redis_opts(redis_server)), cls(redis_opts(redis_server))
    closing += [a, b]
    lock = name()
    g = a.acquire(lock, 1000, 1.0)
    t0 = time.monotonic_ns()
    time.sleep(2.5)  # two and a half leases: only the library's renewer keeps it
    assert_waits_then_times_out(b, lock, 1000)
    evidence = a.release(g)["evidence"]  # the renewer's extends (checker/steps/renewals.py)
    assert evidence["renewer"] in ("renewal thread", "watchdog")
    assert evidence["expire_ms"] == 1000
    extends = evidence["renewals"]
    assert sum(e["ok"] for e in extends) >= 2, extends
    assert all(t0 - 10**9 < e["mono_ns"] < time.monotonic_ns() for e in extends)
    b.release(b.acquire(lock, 1000, 1.0))


def test_python_redis_lock_refuses_a_foreign_release(redis_server: Server,
                                                     closing: list[LockClient]) -> None:
    a = PythonRedisLockClient(redis_opts(redis_server))
    closing.append(a)
    g = a.acquire(name(), 1000, 1.0)
    a.release(g)
    with pytest.raises(DefiniteFailure) as e:
        a.release(g)
    assert e.value.error == "not-owner"


# -- python-etcd3


def test_etcd3_lock_excludes_and_a_contended_acquire_is_a_definite_timeout(
        etcd_cluster: EtcdService, closing: list[LockClient]) -> None:
    opts = {"endpoints": etcd_cluster.endpoints(), "op_timeout_s": 2.0}
    a, b = Etcd3Client(opts), Etcd3Client(opts)
    closing += [a, b]
    lock = name()
    g = a.acquire(lock, 2000, 1.0)
    a.renew(g, 2000)
    assert_waits_then_times_out(b, lock, 2000)  # not the library's TypeError
    a.release(g)
    b.release(b.acquire(lock, 2000, 1.0))
