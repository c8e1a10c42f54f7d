"""Tests of workloads/clients/sentinel.py against a real SentinelService on loopback addresses:
redis-setnx semantics on the primary, following the primary through a failover, and the
definite refusal when no sentinel can name a primary."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from fencecheck.clusters.base import NemesisOp
from fencecheck.clusters.faults.failover import FailoverNemesis
from fencecheck.clusters.services.sentinel import MASTER_NAME, SentinelService
from fencecheck.workloads.base import DefiniteFailure, Grant, Indeterminate
from fencecheck.workloads.clients.sentinel import DEFAULT_SERVICE_NAME, SentinelSetnxClient
from tests import servers
from tests.workloads.lockchecks import acquire_error

sentinel = servers.sentinel  # the fixture (tests/servers.py)


def options(svc: SentinelService, **extra: Any) -> dict[str, Any]:
    return {"endpoints": svc.endpoints(), "op_timeout_s": 0.5, **svc.client_options(), **extra}


def address_of(svc: SentinelService, node: str) -> tuple[str, int]:
    return svc._nodes[node].address, svc.port


def test_service_names_agree() -> None:
    assert DEFAULT_SERVICE_NAME == MASTER_NAME


def test_setnx_semantics_on_the_primary(sentinel: SentinelService) -> None:
    a, b = SentinelSetnxClient(options(sentinel)), SentinelSetnxClient(options(sentinel))
    try:
        assert a.primary_address() == address_of(sentinel, "s1")
        g1 = a.acquire("L", 5000, 0.5)
        assert isinstance(g1, Grant) and isinstance(g1.token, int)
        with pytest.raises(DefiniteFailure, match="held"):
            b.acquire("L", 5000, 0.0)
        a.renew(g1, 5000)
        a.release(g1)
        g2 = b.acquire("L", 5000, 0.0)
        assert g2.token is not None and g2.token > g1.token
        b.release(g2)
    finally:
        a.close()
        b.close()


def test_client_follows_the_new_primary_after_a_failover(sentinel: SentinelService) -> None:
    c = SentinelSetnxClient(options(sentinel))
    try:
        g1 = c.acquire("L", 300, 0.5)  # expired by the time the failover is done
        host, port = c.primary_address()
        with redis.Redis(host=host, port=port, socket_timeout=5) as primary:
            # g1's token must reach both replicas before the primary dies, or the new primary's
            # counter starts lower (asynchronous replication: a race under load, not the client)
            assert primary.wait(2, 5000) == 2
        old = sentinel.kill_primary()
        new = sentinel.wait_for_new_primary(old, timeout_s=20)
        # The pooled connection to the dead primary fails once; that op is recorded as failed
        # or unknown, and the next one asks the sentinels again.
        outcomes: list[str] = []
        deadline = time.monotonic() + 10
        while True:
            try:
                g2 = c.acquire("L", 2000, 0.0)
                break
            except (DefiniteFailure, Indeterminate) as e:
                outcomes.append(e.error)
                assert time.monotonic() < deadline, outcomes
                time.sleep(0.1)
        assert len(outcomes) <= 1
        assert c.primary_address() == address_of(sentinel, new)
        # The token counter had reached the replica before the primary died.
        assert g2.token is not None and g1.token is not None and g2.token == g1.token + 1
        c.release(g2)
    finally:
        c.close()


def test_no_primary_is_a_definite_failure(sentinel: SentinelService) -> None:
    c = SentinelSetnxClient(options(sentinel, service_name="nobody"))
    assert acquire_error(c, timeout_s=0.0, lock="L") == "no-primary"


def test_failover_nemesis_pause_leaves_two_masters_granting_one_lock(
    sentinel: SentinelService,
) -> None:
    """The split brain the failover nemesis is for: a client still connected to the old
    primary is granted a lock that a client of the new primary holds, with the same token."""
    a, b = SentinelSetnxClient(options(sentinel)), SentinelSetnxClient(options(sentinel))
    nem = FailoverNemesis(sentinel, mode="pause")
    try:
        a.release(a.acquire("L", 1000, 0.5))  # a's pooled connection is to s1
        host, port = address_of(sentinel, "s1")
        with redis.Redis(host=host, port=port, socket_timeout=5) as primary:
            # the first token must reach both replicas before the primary goes, or the new
            # primary's counter starts lower and the two grants' tokens differ
            assert primary.wait(2, 5000) == 2
        started = nem.invoke(NemesisOp("start-failover", {"holder": None, "clients": []}))
        assert started == {"primary": "s1", "mode": "pause"}
        new = sentinel.wait_for_new_primary("s1", timeout_s=20)
        gb = b.acquire("L", 30_000, 0.5)  # b connects now: to the new primary
        assert b.primary_address() == address_of(sentinel, new)
        stopped = nem.invoke(NemesisOp("stop-failover"))
        assert stopped["node"] == "s1"
        ga = a.acquire("L", 30_000, 0.5)  # s1 is back and still believes it is the primary
        assert ga.token == gb.token == 2, "two grants of one lock, with one token"
    finally:
        nem.heal()
        a.close()
        b.close()
