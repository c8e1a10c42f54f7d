"""Redlock clients over N independent Redis masters: `RedlockRefClient` ("redlock-ref", our
reference implementation of the published algorithm, redis.io/docs/manual/patterns/distributed-
locks) and `PotteryRedlockClient` ("redlock", the pottery library's `Redlock`). Neither has a
fencing token: grants carry token None.

The reference algorithm, one attempt: SET key value NX PX lease on every master in turn, each with
a short per-node timeout; the lock is ours if a quorum (N/2+1) said yes and the validity, lease -
elapsed (monotonic) - drift (lease*0.01 + 2 ms), is still positive. Otherwise delete our value
everywhere (owner-checked) and try again until the acquire timeout, then fail. Renew is an
owner-checked PEXPIRE that must reach a quorum within the lease; release is an owner-checked
delete on every master.

Options: `endpoints` (the masters), `op_timeout_s` (default per-node timeout, unless
`node_timeout_s`), `retry_delay_ms` (max random delay between attempts, default 50),
`key_prefix` (default "fc:"), and knobs that put a pause *inside* an acquisition, between node
requests (what the validity check exists for): `pause_between_nodes_s` (sleep before every node
request after the first), `stall_probability` and `stall_s` (per attempt, with that probability,
sleep stall_s before one random node request after the first, like a GC pause; `seed` seeds it),
and `on_node_request` (a callable given the node index before each request: a test or worker
may SIGSTOP itself there).
"""

from __future__ import annotations

import logging
import random
import secrets
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import redis
from pottery import (
    ExtendUnlockedLock,
    QuorumIsImpossible,
    Redlock,
    ReleaseUnlockedLock,
    TooManyExtensions,
)
from redis.exceptions import RedisError

from fencecheck.workloads import options as opts
from fencecheck.workloads.base import DefiniteFailure, Grant, Indeterminate, WorkloadError
from fencecheck.workloads.clients.polling import poll
from fencecheck.workloads.clients.redis import RELEASE_LUA, RENEW_LUA, make_redis

log = logging.getLogger(__name__)

CLOCK_DRIFT_FACTOR = 0.01  # the published algorithm's allowance for clock rate differences
DRIFT_CONSTANT_MS = 2.0


def drift_ms(lease_ms: int) -> float:
    return lease_ms * CLOCK_DRIFT_FACTOR + DRIFT_CONSTANT_MS


def _masters(options: Mapping[str, Any]) -> list[redis.Redis]:
    """One never-retrying redis-py client per master, with the per-node timeout."""
    node_timeout_s = float(options.get("node_timeout_s", opts.op_timeout_s(options)))
    return [
        make_redis({"endpoints": [f"{h}:{p}"], "op_timeout_s": node_timeout_s})
        for h, p in opts.endpoints(options)
    ]


@dataclass(frozen=True, slots=True)
class RefHandle:
    key: str
    owner: str


class RedlockRefClient:
    """The published Redlock algorithm, sequential requests, no retries below one attempt."""

    name = "redlock-ref"

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.masters = _masters(options)
        self.quorum = len(self.masters) // 2 + 1
        self.retry_delay_s = float(options.get("retry_delay_ms", 50)) / 1000.0
        self.prefix = str(options.get("key_prefix", "fc:"))
        self.pause_between_nodes_s = float(options.get("pause_between_nodes_s", 0.0))
        hook = options.get("on_node_request")
        if hook is not None and not callable(hook):
            raise WorkloadError("options.on_node_request must be callable")
        self.on_node_request: Callable[[int], None] | None = hook
        self.stall_probability = float(options.get("stall_probability", 0.0))
        self.stall_s = float(options.get("stall_s", 0.0))
        self._rng = random.Random(options.get("seed"))
        self._stall_at = -1

    def _before(self, i: int) -> None:
        if self.on_node_request is not None:
            self.on_node_request(i)
        if i > 0 and self.pause_between_nodes_s > 0:
            time.sleep(self.pause_between_nodes_s)
        if i == self._stall_at:
            log.debug("redlock-ref: stalling %.3f s before master %d", self.stall_s, i)
            time.sleep(self.stall_s)

    def _attempt(self, key: str, owner: str, lease_ms: int) -> tuple[bool, str]:
        """One round over all masters. Returns (granted, reason when not)."""
        self._stall_at = -1
        if len(self.masters) > 1 and self._rng.random() < self.stall_probability:
            self._stall_at = self._rng.randrange(1, len(self.masters))
        start = time.monotonic()
        granted = errors = 0
        for i, m in enumerate(self.masters):
            self._before(i)
            try:
                if m.set(key, owner, nx=True, px=lease_ms):
                    granted += 1
            except RedisError as e:
                errors += 1
                log.debug("redlock-ref: SET on master %d: %s", i, e)
        elapsed_ms = (time.monotonic() - start) * 1000.0
        validity_ms = lease_ms - elapsed_ms - drift_ms(lease_ms)
        if granted >= self.quorum and validity_ms > 0:
            return True, ""
        self._delete_everywhere(key, owner)
        if granted >= self.quorum:
            return False, "validity-expired"
        # Every master answered and too few said yes: someone else holds it.
        return False, "held" if errors == 0 else "no-quorum"

    def _delete_everywhere(self, key: str, owner: str) -> tuple[int, int]:
        deleted = errors = 0
        for i, m in enumerate(self.masters):
            try:
                deleted += int(m.eval(RELEASE_LUA, 1, key, owner))
            except RedisError as e:
                errors += 1
                log.debug("redlock-ref: release on master %d: %s", i, e)
        return deleted, errors

    def acquire(self, lock: str, lease_ms: int, timeout_s: float) -> Grant:
        key = f"{self.prefix}lock:{lock}"
        deadline = time.monotonic() + timeout_s
        while True:
            owner = secrets.token_hex(16)  # a fresh value per attempt, as the algorithm says
            sent = time.monotonic_ns()
            ok, reason = self._attempt(key, owner, lease_ms)
            if ok:
                return Grant(lock=lock, token=None, lease_ms=lease_ms,
                             handle=RefHandle(key, owner), attempt_ns=sent)
            now = time.monotonic()
            if now >= deadline:
                raise DefiniteFailure(reason if timeout_s <= 0 or reason != "held" else "timeout")
            time.sleep(min(random.uniform(0, self.retry_delay_s), deadline - now))

    def renew(self, grant: Grant, lease_ms: int) -> Grant:
        h: RefHandle = grant.handle
        start = time.monotonic()
        extended = errors = 0
        for i, m in enumerate(self.masters):
            try:
                extended += int(m.eval(RENEW_LUA, 1, h.key, h.owner, int(lease_ms)))
            except RedisError as e:
                errors += 1
                log.debug("redlock-ref: PEXPIRE on master %d: %s", i, e)
        elapsed_ms = (time.monotonic() - start) * 1000.0
        if extended >= self.quorum and lease_ms - elapsed_ms - drift_ms(lease_ms) > 0:
            return Grant(grant.lock, None, lease_ms, h)
        if extended + errors >= self.quorum and extended < self.quorum:
            raise Indeterminate("timeout", f"renewed on {extended}, {errors} unknown")
        raise DefiniteFailure("not-owner" if extended < self.quorum else "validity-expired")

    def release(self, grant: Grant) -> None:
        h: RefHandle = grant.handle
        deleted, errors = self._delete_everywhere(h.key, h.owner)
        if deleted >= self.quorum:
            return
        if deleted + errors >= self.quorum:
            raise Indeterminate("timeout", f"released on {deleted}, {errors} unknown")
        raise DefiniteFailure("not-owner", grant.lock)

    def close(self) -> None:
        for m in self.masters:
            m.close()


class PotteryRedlockClient:
    """pottery's `Redlock` as shipped: parallel requests, validity check, release on failure.
    auto_release_time = the lease; a blocking acquire up to the timeout (pottery's own retry
    loop, within one operation); renew is `extend` (no extension limit)."""

    name = "redlock"

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.masters = _masters(options)
        self.prefix = str(options.get("key_prefix", "fc:"))

    def acquire(self, lock: str, lease_ms: int, timeout_s: float) -> Grant:
        rl = Redlock(
            key=f"{self.prefix}{lock}",  # pottery adds its own "redlock:" prefix
            masters=self.masters,
            # Without it pottery reports a majority of unreachable masters as "not ours",
            # which would turn an unknown renew or release into a definite one.
            raise_on_redis_errors=True,
            auto_release_time=lease_ms / 1000.0,
            num_extensions=sys.maxsize,
        )
        # pottery's own blocking loop (non-blocking tries, a random delay up to its retry delay
        # between them), spelled out so that the winning attempt's send time is known
        def attempt() -> bool | None:
            try:
                return rl.acquire(blocking=False) or None
            except QuorumIsImpossible as e:  # pottery has already released what it got
                raise DefiniteFailure("no-quorum", str(e)) from e
            except RedisError as e:  # pottery catches per-master errors; this is anything else
                raise Indeterminate("error", f"{type(e).__name__}: {e}") from e

        _, sent = poll(lock, timeout_s, attempt,
                       lambda: random.uniform(0, Redlock._RETRY_DELAY))
        return Grant(lock=lock, token=None, lease_ms=lease_ms, handle=rl, attempt_ns=sent)

    def renew(self, grant: Grant, lease_ms: int) -> Grant:
        rl: Redlock = grant.handle
        rl.auto_release_time = lease_ms / 1000.0
        try:
            rl.extend()
        except (ExtendUnlockedLock, TooManyExtensions) as e:
            raise DefiniteFailure("not-owner", grant.lock) from e
        except QuorumIsImpossible as e:
            raise Indeterminate("no-quorum", str(e)) from e
        except RedisError as e:
            raise Indeterminate("error", f"{type(e).__name__}: {e}") from e
        return Grant(grant.lock, None, lease_ms, rl)

    def release(self, grant: Grant) -> None:
        rl: Redlock = grant.handle
        try:
            rl.release()
        except ReleaseUnlockedLock as e:
            raise DefiniteFailure("not-owner", grant.lock) from e
        except QuorumIsImpossible as e:
            raise Indeterminate("no-quorum", str(e)) from e
        except RedisError as e:
            raise Indeterminate("error", f"{type(e).__name__}: {e}") from e

    def close(self) -> None:
        for m in self.masters:
            m.close()
