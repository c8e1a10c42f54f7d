"""Tests of workloads/clients/redlock.py against five real redis-server masters on loopback
addresses: quorum, refusal without it, the validity check (including a worker SIGSTOPped between
its node requests), renew and release, for both the reference client and pottery's Redlock."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from fencecheck.clusters.faults.clock import ClockControl
from fencecheck.clusters.services.redis import RedisService
from fencecheck.workloads.base import DefiniteFailure, Grant, LockClient
from fencecheck.workloads.clients.redlock import PotteryRedlockClient, RedlockRefClient, RefHandle
from tests.servers import clock_control, random_loopback_nodes, redis_service


@pytest.fixture(scope="module")
def shim_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("shim")


@pytest.fixture
def clocks(tmp_path: Path, shim_cache: Path) -> Iterator[ClockControl]:
    nodes = random_loopback_nodes("m", 5)
    with clock_control(tmp_path / "clock", nodes, shim_cache) as c:
        yield c


@pytest.fixture
def masters(clocks: ClockControl, tmp_path: Path) -> Iterator[RedisService]:
    """Five independent masters whose wall clocks `clocks` can move."""
    with redis_service(clocks.nodes, tmp_path / "store", clocks.env_for) as svc:
        yield svc


def options(svc: RedisService, **extra: Any) -> dict[str, Any]:
    return {"endpoints": svc.endpoints(), "op_timeout_s": 0.5, **extra}


def values(svc: RedisService, key: str) -> list[str | None]:
    out: list[str | None] = []
    for ep in svc.endpoints():
        host, port = ep.split(":")
        r = redis.Redis(
            host=host,
            port=int(port),
            socket_timeout=1,
            decode_responses=True,
            retry=Retry(NoBackoff(), 0),  # redis-py would back off for seconds on a dead master
        )
        try:
            v = r.get(key)
            out.append(None if v is None else str(v))
        except redis.ConnectionError:
            out.append("<down>")
        finally:
            r.close()
    return out


def test_ref_grants_on_a_quorum_and_excludes_others(masters: RedisService) -> None:
    a, b = RedlockRefClient(options(masters)), RedlockRefClient(options(masters))
    try:
        g = a.acquire("L", 5000, 1.0)
        assert g.token is None and isinstance(g.handle, RefHandle)
        assert values(masters, g.handle.key) == [g.handle.owner] * 5
        with pytest.raises(DefiniteFailure) as e:
            b.acquire("L", 5000, 0.0)
        assert e.value.error == "held"
        with pytest.raises(DefiniteFailure, match="timeout"):
            b.acquire("L", 5000, 0.2)
        a.release(g)
        assert values(masters, g.handle.key) == [None] * 5
        g2 = b.acquire("L", 5000, 0.0)
        with pytest.raises(DefiniteFailure, match="not-owner"):
            a.release(g)  # releasing an old grant must not touch the new holder's keys
        assert values(masters, g2.handle.key) == [g2.handle.owner] * 5
    finally:
        a.close()
        b.close()


def test_ref_needs_a_majority_of_masters(masters: RedisService) -> None:
    c = RedlockRefClient(options(masters, node_timeout_s=0.2))
    try:
        masters.kill("m1")
        masters.kill("m2")
        g = c.acquire("L", 5000, 0.0)  # 3 of 5 is a quorum
        c.release(g)
        masters.kill("m3")
        with pytest.raises(DefiniteFailure) as e:
            c.acquire("L", 5000, 0.0)
        assert e.value.error == "no-quorum"
        # The two masters that said yes were cleaned up again.
        assert values(masters, "fc:lock:L")[3:] == [None, None]
    finally:
        c.close()


def test_ref_validity_check_throws_away_a_slow_acquisition(masters: RedisService) -> None:
    slow = RedlockRefClient(options(masters, on_node_request=lambda i: time.sleep(0.06)))
    other = RedlockRefClient(options(masters))
    try:
        with pytest.raises(DefiniteFailure) as e:
            slow.acquire("L", 200, 0.0)  # five requests take > 0.3 s, the lease is 0.2 s
        assert e.value.error == "validity-expired"
        assert values(masters, "fc:lock:L") == [None] * 5
        other.release(other.acquire("L", 200, 0.0))  # nothing left behind that blocks others
        g = slow.acquire("L", 2000, 0.0)  # the same delays fit in a 2 s lease
        slow.release(g)
    finally:
        slow.close()
        other.close()


_PAUSED_WORKER = """
import json, os, signal, sys
from fencecheck.workloads.base import DefiniteFailure
from fencecheck.workloads.clients.redlock import RedlockRefClient

def hook(i):
    if i == 2:
        os.kill(os.getpid(), signal.SIGSTOP)  # as a GC pause would, between node requests

c = RedlockRefClient({"endpoints": json.loads(sys.argv[1]), "on_node_request": hook})
try:
    c.acquire("L", 300, 0.0)
    print("granted")
except DefiniteFailure as e:
    print(e.error)
"""


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def test_ref_worker_paused_between_node_requests_gets_no_grant(masters: RedisService) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _PAUSED_WORKER, json.dumps(masters.endpoints())],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        deadline = time.monotonic() + 20
        while not _stopped(proc.pid):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.01)
        assert values(masters, "fc:lock:L")[:2] != [None, None]  # it got two nodes so far
        time.sleep(0.5)  # past the 300 ms lease
        os.kill(proc.pid, signal.SIGCONT)
        out, _ = proc.communicate(timeout=20)
        assert out.strip() == "validity-expired"
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait()


def test_ref_renew_extends_and_fails_once_lost(masters: RedisService) -> None:
    c = RedlockRefClient(options(masters))
    try:
        g = c.acquire("L", 300, 0.0)
        g2 = c.renew(g, 5000)
        assert g2.lease_ms == 5000 and g2.handle == g.handle
        time.sleep(0.4)  # the original lease would have run out
        assert values(masters, g.handle.key) == [g.handle.owner] * 5
        c.release(g2)
        with pytest.raises(DefiniteFailure, match="not-owner"):
            c.renew(g2, 5000)
    finally:
        c.close()


def test_pottery_redlock_acquires_renews_releases(masters: RedisService) -> None:
    a, b = PotteryRedlockClient(options(masters)), PotteryRedlockClient(options(masters))
    try:
        g = a.acquire("P", 5000, 1.0)
        assert isinstance(g, Grant) and g.token is None
        key = g.handle.key
        # pottery's acquire, like its release, returns once a majority of masters answered; the
        # rest of its SETs may still be in flight (one was, under load, in a run of the test
        # command)
        assert len(masters.endpoints()) - values(masters, key).count(None) >= 3
        with pytest.raises(DefiniteFailure):
            b.acquire("P", 5000, 0.0)
        a.renew(g, 5000)
        a.release(g)
        # pottery's release returns once a majority of masters deleted the key; the rest of its
        # deletes may still be in flight (under load one was, in one run of the test command)
        assert values(masters, key).count(None) >= 3
        with pytest.raises(DefiniteFailure, match="not-owner"):
            a.release(g)
        b.release(b.acquire("P", 5000, 0.0))
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("kind", [RedlockRefClient, PotteryRedlockClient])
def test_a_retrying_acquire_says_when_its_winning_attempt_was_sent(
        masters: RedisService, kind: type[LockClient]) -> None:
    a, b = kind(options(masters)), kind(options(masters))  # type: ignore[call-arg]
    try:
        a.acquire("W", 300, 1.0)
        invoked = time.monotonic_ns()
        g = b.acquire("W", 300, 3.0)  # retries until a's lease runs out
        returned = time.monotonic_ns()
        assert g.attempt_ns is not None
        assert invoked + 100_000_000 <= g.attempt_ns <= returned
    finally:
        a.close()
        b.close()


def test_pottery_redlock_refuses_without_a_majority(masters: RedisService) -> None:
    c = PotteryRedlockClient(options(masters, node_timeout_s=0.2))
    try:
        for m in ("m1", "m2", "m3"):
            masters.kill(m)
        with pytest.raises(DefiniteFailure):
            c.acquire("P", 5000, 0.0)
    finally:
        c.close()


def test_ref_stall_option_lands_a_pause_inside_acquisition(masters: RedisService) -> None:
    c = RedlockRefClient(options(masters, stall_probability=1.0, stall_s=0.3, seed=7))
    try:
        with pytest.raises(DefiniteFailure, match="validity-expired"):
            c.acquire("L", 200, 0.0)
        c.release(c.acquire("L", 2000, 0.0))
    finally:
        c.close()


CLIENTS: dict[str, Callable[[dict[str, Any]], LockClient]] = {
    "redlock-ref": RedlockRefClient,
    "redlock": PotteryRedlockClient,
}


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_clock_jump_on_a_majority_grants_the_lock_twice(
    client: str, masters: RedisService, clocks: ClockControl
) -> None:
    """Kleppmann's case: the lock expires early on a majority whose clocks jumped."""
    a, b = CLIENTS[client](options(masters)), CLIENTS[client](options(masters))
    try:
        t0 = time.monotonic()
        a.acquire("J", 10_000, 0.0)
        with pytest.raises(DefiniteFailure):
            b.acquire("J", 10_000, 0.0)
        clocks.bump(["m1", "m2", "m3"], 20.0)
        time.sleep(0.05)  # the shim picks up a new offset within 10 ms
        b.acquire("J", 10_000, 0.0)
        assert time.monotonic() - t0 < 5, "both grants must fall inside a's lease"
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_restart_without_persistence_grants_the_lock_twice(
    client: str, masters: RedisService
) -> None:
    a, b = CLIENTS[client](options(masters)), CLIENTS[client](options(masters))
    try:
        t0 = time.monotonic()
        a.acquire("K", 10_000, 0.0)
        for m in ("m1", "m2", "m3"):
            masters.restart(m)  # kill, then start empty: persistence is off
        b.acquire("K", 10_000, 0.0)
        assert time.monotonic() - t0 < 5, "both grants must fall inside a's lease"
    finally:
        a.close()
        b.close()
