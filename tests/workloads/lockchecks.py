"""Checks shared by the lock-client tests (etcd, ZooKeeper, Sentinel): clients taking turns on
one lock, strictly increasing tokens, and the definite failures of a waiter and of an
unreachable service."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest

from fencecheck.workloads.base import DefiniteFailure, Grant, LockClient


def take_turns(clients: Sequence[LockClient], lock: str, lease_ms: int) -> list[Grant]:
    """a, b, c, a, c (of clients a, b, c) each acquire and release lock; their grants."""
    a, b, c = clients
    grants = []
    for client in (a, b, c, a, c):
        g = client.acquire(lock, lease_ms, 2.0)
        grants.append(g)
        client.release(g)
    return grants


def assert_strictly_increasing(tokens: Sequence[int | None]) -> None:
    ints = [t for t in tokens if isinstance(t, int)]
    assert ints == list(tokens), f"not all tokens are ints: {tokens}"
    assert ints == sorted(ints) and len(set(ints)) == len(ints)


def assert_waits_then_times_out(client: LockClient, lock: str, lease_ms: int) -> None:
    """A waiter on a lock held throughout fails definitely ("timeout"), after its 0.5 s."""
    t0 = time.monotonic()
    with pytest.raises(DefiniteFailure) as e:
        client.acquire(lock, lease_ms, 0.5)
    assert e.value.error == "timeout"  # proven never granted: the holder held it throughout
    assert time.monotonic() - t0 >= 0.5


def acquire_error(client: LockClient, timeout_s: float = 1.0, lock: str = "x") -> str:
    """The error of the DefiniteFailure that acquiring lock must raise; closes client."""
    try:
        with pytest.raises(DefiniteFailure) as e:
            client.acquire(lock, 1000, timeout_s)
        return e.value.error
    finally:
        client.close()
