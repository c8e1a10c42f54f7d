"""ZkClient against a real 3-server ZooKeeper ensemble: tokens, mutual exclusion, session
expiry of a paused holder (a real SIGSTOPped process), and fail/info mapping."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from fencecheck.clusters.services.zookeeper import ZookeeperService
from fencecheck.workloads.base import DefiniteFailure, Indeterminate
from fencecheck.workloads.clients.zk import ZkClient, ZkHandle
from tests.backends import store_dir, zk_cluster
from tests.conftest import REPO
from tests.workloads.lockchecks import (
    acquire_error,
    assert_strictly_increasing,
    assert_waits_then_times_out,
    take_turns,
)

__all__ = ["store_dir", "zk_cluster"]

# A lock holder in its own process, so SIGSTOP pauses it (and kazoo's pings) like a GC pause.
HOLDER = """
import json, sys
from fencecheck.workloads.clients.zk import ZkClient
c = ZkClient({"endpoints": sys.argv[1].split(","), "op_timeout_s": 1.0})
g = c.acquire(sys.argv[2], int(sys.argv[3]), 5.0)
print(json.dumps({"token": g.token}), flush=True)
for line in sys.stdin:
    try:
        g = c.renew(g, int(sys.argv[3]))
        print(json.dumps({"renew": "ok"}), flush=True)
    except Exception as e:
        print(json.dumps({"renew": getattr(e, "error", repr(e))}), flush=True)
c.close()
"""


@pytest.fixture
def clients(zk_cluster: ZookeeperService) -> Iterator[list[ZkClient]]:
    made = [
        ZkClient({"endpoints": zk_cluster.endpoints(), "op_timeout_s": 2.0, "worker": i})
        for i in range(3)
    ]
    yield made
    for c in made:
        c.close()


@pytest.fixture
def holder(zk_cluster: ZookeeperService) -> Iterator[Any]:
    procs: list[subprocess.Popen[str]] = []

    def start(lock: str, lease_ms: int) -> subprocess.Popen[str]:
        p = subprocess.Popen(
            [sys.executable, "-c", HOLDER, ",".join(zk_cluster.endpoints()), lock, str(lease_ms)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO,
        )
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.send_signal(signal.SIGCONT)
        p.kill()
        p.wait(10)


def test_tokens_strictly_increase_across_clients(clients: list[ZkClient]) -> None:
    grants = take_turns(clients, "inc", 4000)
    for g in grants:
        assert isinstance(g.handle, ZkHandle) and g.handle.path.startswith("/fc/locks/inc/")
    assert_strictly_increasing([g.token for g in grants])


def test_second_client_waits_then_fails_definitely(clients: list[ZkClient]) -> None:
    a, b, _ = clients
    g = a.acquire("excl", 4000, 2.0)
    assert_waits_then_times_out(b, "excl", 4000)
    a.renew(g, 4000)
    with pytest.raises(DefiniteFailure) as e:
        a.renew(g, 60_000)  # the session timeout is fixed when the session opens
    assert e.value.error == "lease-too-long"
    a.release(g)
    g2 = b.acquire("excl", 4000, 2.0)
    assert g.token is not None and g2.token is not None and g2.token > g.token
    b.release(g2)
    with pytest.raises(DefiniteFailure) as e:
        b.release(g2)
    assert e.value.error == "lock-lost"


def test_paused_holder_session_expires(clients: list[ZkClient], holder: Any) -> None:
    _, b, _ = clients
    p = holder("expiry", 1000)
    assert p.stdout is not None and p.stdin is not None
    first = json.loads(p.stdout.readline())["token"]
    with pytest.raises(DefiniteFailure):
        b.acquire("expiry", 1000, 0.3)  # held while the holder runs
    p.send_signal(signal.SIGSTOP)  # no pings: the session (the lease) runs out
    t0 = time.monotonic()
    g = b.acquire("expiry", 1000, 10.0)
    assert 0.5 <= time.monotonic() - t0 < 8.0
    assert g.token is not None and g.token > first
    p.send_signal(signal.SIGCONT)
    # Right after the pause the holder may not know yet (its request meets the dropped
    # connection: info); it never hears "ok", and once reconnected it hears a definite no.
    answers: list[str] = []
    deadline = time.monotonic() + 15.0
    while not answers or answers[-1] == "timeout":
        assert time.monotonic() < deadline, answers
        p.stdin.write("renew\n")
        p.stdin.flush()
        answers.append(json.loads(p.stdout.readline())["renew"])
        time.sleep(0.2)
    assert set(answers) <= {"timeout", "lock-lost", "not-connected"}, answers
    b.release(g)


TOLD = """
import json, sys, time
from fencecheck.workloads.clients.zk import ZkClient
c = ZkClient({"endpoints": sys.argv[1].split(","), "op_timeout_s": 1.0})
c.on_notice(lambda lock, token, reason: print(json.dumps([lock, token, reason]), flush=True))
g = c.acquire(sys.argv[2], int(sys.argv[3]), 5.0)
print(json.dumps(g.token), flush=True)
time.sleep(60)
"""


def test_a_paused_holder_is_told_by_kazoo_that_its_lock_is_lost(
        zk_cluster: ZookeeperService, clients: list[ZkClient]) -> None:
    """kazoo's SUSPENDED and LOST session states are notices about the grant held (its token),
    given as soon as the holder runs again after its session expired."""
    _, b, _ = clients
    p = subprocess.Popen([sys.executable, "-c", TOLD, ",".join(zk_cluster.endpoints()), "told",
                          "1000"], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert p.stdout is not None
        token = json.loads(p.stdout.readline())
        p.send_signal(signal.SIGSTOP)
        g = b.acquire("told", 1000, 10.0)  # the paused holder's session expired
        p.send_signal(signal.SIGCONT)
        told = [json.loads(p.stdout.readline()) for _ in range(2)]
        assert told == [["told", token, "SUSPENDED"], ["told", token, "LOST"]], told
        b.release(g)
    finally:
        p.send_signal(signal.SIGCONT)
        p.kill()
        p.wait(10)


def test_unreachable_ensemble_is_a_definite_failure() -> None:
    c = ZkClient({"endpoints": ["127.0.45.20:2181"], "op_timeout_s": 0.5})
    assert acquire_error(c) == "connection-refused"


def test_lock_survives_the_crash_of_its_server(
    zk_cluster: ZookeeperService, clients: list[ZkClient]
) -> None:
    """kazoo reconnects the session (not an operation) to another server: the lease lives on."""
    a, b, _ = clients  # a's first host is z1 (worker 0, hosts not shuffled)
    g = a.acquire("crash", 4000, 2.0)
    zk_cluster.kill("z1")
    try:
        deadline = time.monotonic() + 3.0  # well inside the 4 s session
        while True:
            try:
                g = a.renew(g, 4000)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        with pytest.raises(DefiniteFailure):
            b.acquire("crash", 4000, 0.3)
        a.release(g)
    finally:
        zk_cluster.restart("z1")
        zk_cluster.wait_ready(30.0, ["z1"])


def test_an_unknown_release_ends_the_session_so_its_node_does_not_hold_the_lock(
    clients: list[ZkClient],
) -> None:
    """A release whose reply is lost is `info`; the client then ends its session, so the lock node
    does not outlive it (kazoo keeps a session alive while the client runs: one lost reply held
    the lock for the rest of a membership run). The reply is lost by a delete that never answers;
    the server, the sessions and the other client are real."""
    a, b, _ = clients
    g = a.acquire("lost-reply", 10_000, 2.0)
    assert a.zk is not None
    never = a.zk.handler.async_result()  # a reply that never comes
    a.zk.delete_async = lambda path, version=-1: never  # type: ignore[method-assign]
    with pytest.raises(Indeterminate):
        a.release(g)
    assert a.zk is None, "the session of an unknown release was kept"
    # Within a 10 s session: only a closed session frees the node this soon.
    got = b.acquire("lost-reply", 10_000, 3.0)
    assert got.token > g.token
    b.release(got)
    g2 = a.acquire("lost-reply", 10_000, 2.0)  # a new session, a new grant
    assert g2.token > got.token
    a.release(g2)
