"""Tests of workloads/clients/redis.py against a real redis-server on 127.0.0.1."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from fencecheck.workloads.base import DefiniteFailure, Grant, Indeterminate, LockClient
from fencecheck.workloads.clients.redis import RedisPyClient, SetnxClient
from tests.workloads.conftest import Server, StartServer, free_port

KINDS = [SetnxClient, RedisPyClient]


def options(server: Server, timeout_s: float = 2.0) -> dict[str, Any]:
    return {"endpoints": [server.address], "op_timeout_s": timeout_s}


def name() -> str:
    return f"lock-{uuid.uuid4().hex[:8]}"


def test_setnx_tokens_strictly_increase(redis_server: Server) -> None:
    a, b = SetnxClient(options(redis_server)), SetnxClient(options(redis_server))
    try:
        lock, tokens = name(), []
        for i in range(20):
            client = a if i % 2 else b
            grant = client.acquire(lock, 1000, 1.0)
            assert isinstance(grant.token, int)
            tokens.append(grant.token)
            client.release(grant)
        assert tokens == sorted(set(tokens)) and tokens[0] >= 1
        # tokens are per lock: another lock starts its own counter
        other = a.acquire(name(), 1000, 1.0)
        assert other.token == 1
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("kind", KINDS)
def test_second_acquire_fails_definitely_after_its_timeout(
    redis_server: Server, kind: type[LockClient]
) -> None:
    a, b = kind(options(redis_server)), kind(options(redis_server))  # type: ignore[call-arg]
    try:
        lock = name()
        grant = a.acquire(lock, 5000, 1.0)
        t = time.monotonic()
        with pytest.raises(DefiniteFailure) as e:
            b.acquire(lock, 5000, 0.3)
        assert e.value.error == "timeout"
        # redis-py's Lock gives up one poll early when the next poll would be past the timeout
        assert 0.3 - 0.01 <= time.monotonic() - t < 2.0
        a.release(grant)
        b.release(b.acquire(lock, 5000, 0.3))
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("kind", KINDS)
def test_acquire_waits_for_a_lease_to_expire(redis_server: Server, kind: type[LockClient]) -> None:
    a, b = kind(options(redis_server)), kind(options(redis_server))  # type: ignore[call-arg]
    try:
        lock = name()
        a.acquire(lock, 200, 1.0)
        t = time.monotonic()
        b.acquire(lock, 200, 2.0)
        assert 0.1 <= time.monotonic() - t < 2.0
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_polling_acquire_says_when_its_winning_attempt_was_sent(
        redis_server: Server, kind: type[LockClient]) -> None:
    a, b = kind(options(redis_server)), kind(options(redis_server))  # type: ignore[call-arg]
    try:
        lock = name()
        first = a.acquire(lock, 300, 1.0)
        assert first.attempt_ns is not None
        invoked = time.monotonic_ns()
        g = b.acquire(lock, 300, 2.0)  # polls until a's lease runs out
        returned = time.monotonic_ns()
        assert g.attempt_ns is not None
        # the winning attempt is a late one: well after the invoke, before the return
        assert invoked + 100_000_000 <= g.attempt_ns <= returned
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("kind", KINDS)
def test_renew_extends_the_lease(redis_server: Server, kind: type[LockClient]) -> None:
    a, b = kind(options(redis_server)), kind(options(redis_server))  # type: ignore[call-arg]
    admin = redis_server.admin()
    try:
        lock = name()
        # a first lease of 1.5 s, not 0.3: on a loaded machine (a CI run, stop 45) more than
        # 300 ms passed between the grant and the renew, the lease ran out and the renew was
        # rightly refused ("not-owner")
        grant = a.acquire(lock, 1_500, 1.0)
        grant = a.renew(grant, 10_000)
        assert grant.lease_ms == 10_000
        assert admin.pttl(f"fc:lock:{lock}") > 5_000
        time.sleep(1.6)  # past the first lease
        with pytest.raises(DefiniteFailure):
            b.acquire(lock, 300, 0.0)
        a.release(grant)
        b.acquire(lock, 300, 0.0)
    finally:
        admin.close()
        a.close()
        b.close()


@pytest.mark.parametrize("kind", KINDS)
def test_renew_and_release_by_a_non_owner_are_refused(
    redis_server: Server, kind: type[LockClient]
) -> None:
    a, b = kind(options(redis_server)), kind(options(redis_server))  # type: ignore[call-arg]
    try:
        lock = name()
        stale = a.acquire(lock, 100, 1.0)
        time.sleep(0.15)
        held = b.acquire(lock, 5000, 1.0)
        with pytest.raises(DefiniteFailure) as e:
            a.renew(stale, 5000)
        assert e.value.error == "not-owner"
        with pytest.raises(DefiniteFailure) as e:
            a.release(stale)
        assert e.value.error == "not-owner"
        with pytest.raises(DefiniteFailure):
            a.acquire(lock, 100, 0.0)  # b still holds it: the refusals changed nothing
        b.release(held)
    finally:
        a.close()
        b.close()


def test_setnx_release_with_a_foreign_owner_value_is_refused(redis_server: Server) -> None:
    a = SetnxClient(options(redis_server))
    try:
        lock = name()
        grant = a.acquire(lock, 5000, 1.0)
        with pytest.raises(DefiniteFailure, match="not-owner"):
            a.release(Grant(lock, grant.token, 5000, handle="someone-else"))
        a.release(grant)
    finally:
        a.close()


@pytest.mark.parametrize("kind", KINDS)
def test_connection_refused_is_definite(kind: type[LockClient]) -> None:
    client = kind({"endpoints": [f"127.0.0.1:{free_port()}"], "op_timeout_s": 1})  # type: ignore[call-arg]
    t = time.monotonic()
    with pytest.raises(DefiniteFailure) as e:
        client.acquire(name(), 1000, 1.0)
    assert e.value.error == "connection-refused"
    assert time.monotonic() - t < 1.0  # no retries with backoff
    client.close()


@pytest.mark.parametrize("kind", KINDS)
def test_paused_server_is_indeterminate_after_one_attempt(
    start_redis: StartServer, kind: type[LockClient]
) -> None:
    server = start_redis()
    client = kind(options(server, timeout_s=0.5))  # type: ignore[call-arg]
    admin = server.admin()
    try:
        client.release(client.acquire(name(), 1000, 1.0))  # the connection is up
        admin.config_resetstat()
        lock = name()
        server.pause()
        t = time.monotonic()
        with pytest.raises(Indeterminate) as e:
            client.acquire(lock, 60_000, 5.0)
        elapsed = time.monotonic() - t
        server.resume()
        assert e.value.error == "timeout"
        # redis-py's default (10 retries with backoff) took 9.8 s here
        assert 0.5 <= elapsed < 2.5
        time.sleep(0.2)
        stats = admin.info("commandstats")
        # redis-py's Lock acquires with a plain SET; ours with a script (whose SET counts too)
        counted = "cmdstat_set" if kind is RedisPyClient else "cmdstat_eval"
        assert stats[counted]["calls"] == 1, stats
        # the request the client gave up on did take effect: that is why it is `info`
        assert admin.exists(f"fc:lock:{lock}") == 1
        # the next operation reconnects and is answered
        with pytest.raises(DefiniteFailure):
            client.acquire(lock, 1000, 0.0)
    finally:
        server.resume()
        admin.close()
        client.close()
