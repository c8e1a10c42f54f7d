"""The lease model the lock checks share: grants, their surely-held intervals, write ownership.

A *grant* is an acquire that completed ok. It is surely held from its ok time until the earliest
of: its process's next release or acquire invoke on that lock (or a release of that lock with its
token by anyone, as a worker does after its old id was retired by an `info`), and the lease's
surely-held end, `invoke + lease_ms * (1 - max_drift)` of the acquire or of the last ok renew.
The lease cannot have started before the invoke, so until that time the service must consider it
held. A renewal that completes ok extends that end; one invoked after the end leaves a gap in
which the lock may have lapsed (and been held by another), so it does not bridge it: the grant
is surely held again only from the renewal's ok (a further stretch, in `Grant.segments`).

Also here: small helpers the checks use to explain and cap what they report.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fencecheck.checker.base import NEMESIS, Op, OpRef, Process, Violation, op_ref

MAX_REPORTED = 100  # violations listed per check; all are counted in the check's details
NS_PER_MS = 1_000_000


@dataclass(frozen=True, slots=True)
class Grant:
    """One ok acquire of one lock, with the interval it was surely held."""

    id: int
    lock: str
    process: Process
    acquire: Op
    token: int | None
    start: int  # the acquire's ok time (ns)
    end: float  # surely held until (ns); math.inf: nothing in the history ends it
    ended_by: str  # "release", "acquire", "release-by-token", "lease" or "nothing"
    expired_at: float  # the lease surely expired (last ok acquire/renew ok + lease*(1+drift))
    # further surely-held stretches, after renewals that came too late to bridge the lease:
    # (start ns, end ns, ended_by); `end`/`ended_by` above are of the first stretch
    segments: tuple[tuple[int, float, str], ...] = ()

    def held(self) -> list[tuple[int, float, str]]:
        """Every surely-held stretch (start, end, ended_by), first to last."""
        return [(self.start, self.end, self.ended_by), *self.segments]

    @property
    def ref(self) -> OpRef:
        return op_ref(self.acquire)


@dataclass(frozen=True, slots=True)
class GrantTable:
    """All grants in acquire-invoke order (`grants[i].id == i`), the grant each accepted write
    belongs to, and per key the accepted writes and the last ok read (one pass serves all the
    checks)."""

    grants: list[Grant]
    write_grant: dict[int, int]  # accepted write's invoke index -> grant id
    max_drift: float
    writes: dict[str, list[Op]]  # key -> accepted writes (with an end), in invoke order
    last_reads: dict[str, Op]  # key -> the ok read invoked last
    acquires_without_lock: int = 0


@dataclass(slots=True)
class _Open:
    id: int
    lock: str
    process: Process
    acquire: Op
    token: int | None
    lease_ms: float | None
    held_until: float
    expired_at: float
    seg_start: int = 0  # start of the current stretch
    stretches: list[tuple[int, float, str]] | None = None  # the stretches closed by a gap


def _lease_ns(lease_ms: Any, factor: float) -> float | None:
    if isinstance(lease_ms, int | float) and not isinstance(lease_ms, bool):
        return lease_ms * NS_PER_MS * factor
    return None


def _token(op: Op) -> int | None:
    t = op.get("token")
    return t if type(t) is int else None


def build_grants(ops: Sequence[Op], *, max_drift: float = 0.01) -> GrantTable:
    """One pass over ops in invoke order (each process's ops are sequential in it)."""
    short = 1.0 - max_drift
    long = 1.0 + max_drift
    done: list[Grant | None] = []
    open_pl: dict[tuple[Process, Any], _Open] = {}
    open_token: dict[tuple[Any, int], _Open] = {}
    last_pl: dict[tuple[Process, Any], int] = {}
    write_grant: dict[int, int] = {}
    writes: dict[str, list[Op]] = {}
    last_reads: dict[str, Op] = {}
    no_lock = 0

    def close(g: _Open, at: float, by: str) -> None:
        if at < g.held_until:
            end, by = at, by
        else:
            end, by = g.held_until, ("lease" if g.held_until < math.inf else "nothing")
        last = (g.seg_start, end, by)
        first, *rest = [*g.stretches, last] if g.stretches else [last]
        done[g.id] = Grant(g.id, g.lock, g.process, g.acquire, g.token, first[0], first[1],
                           first[2], g.expired_at, tuple(rest))
        if g.token is not None and open_token.get((g.lock, g.token)) is g:
            del open_token[(g.lock, g.token)]

    for op in ops:
        f = op.f
        p = op.process
        if p == NEMESIS:
            continue
        v = op.value
        if v is None:
            continue
        if f == "write":
            if op.type == "ok":
                wlock = v.get("lock")
                gid = last_pl.get((p, wlock)) if type(wlock) is str else None
                if gid is not None:
                    write_grant[op.index] = gid
                rkey = v.get("key")
                # A cron job's execution (it carries "job") is judged by the jobs check, which
                # knows whether duplicates are harmless or deduplicated, not as a counter write.
                if type(rkey) is str and "job" not in v:
                    kw = writes.get(rkey)
                    if kw is None:
                        writes[rkey] = [op]
                    else:
                        kw.append(op)
            continue
        if f == "read":
            if op.type == "ok":
                rkey = v.get("key")
                if type(rkey) is str:
                    last_reads[rkey] = op
            continue
        if f == "acquire" or f == "release":
            lock = v.get("lock")
            if type(lock) is not str:
                no_lock += f == "acquire"
                continue
            key = (p, lock)
            cur = open_pl.pop(key, None)
            if cur is not None:
                close(cur, op.time, f)
            if f == "release":
                tok = _token(op)
                other = open_token.get((lock, tok)) if tok is not None else None
                if other is not None and other.process != p:
                    del open_pl[(other.process, lock)]
                    close(other, op.time, "release-by-token")
            elif op.type == "ok":
                lease = v.get("lease_ms")
                held = _lease_ns(lease, short)
                expire = _lease_ns(lease, long)
                assert op.end_time is not None  # an ok op has completed
                g = _Open(len(done), lock, p, op, _token(op),
                          lease if isinstance(lease, int | float) else None,
                          math.inf if held is None else op.time + held,
                          math.inf if expire is None else op.end_time + expire, op.end_time)
                done.append(None)
                open_pl[key] = g
                last_pl[key] = g.id
                if g.token is not None:
                    open_token[(lock, g.token)] = g
        elif f == "renew" and op.type == "ok":
            rlock = v.get("lock")
            cur = open_pl.get((p, rlock)) if type(rlock) is str else None
            if cur is None or cur.held_until == math.inf:
                continue
            lease = v.get("lease_ms", cur.lease_ms)
            held = _lease_ns(lease, short)
            expire = _lease_ns(lease, long)
            if held is None or expire is None:
                continue
            assert op.end_time is not None
            if op.time <= cur.held_until:
                cur.held_until = max(cur.held_until, op.time + held)
            elif op.end_time < op.time + held:
                # too late to bridge: a new stretch from the renewal's ok
                if cur.stretches is None:
                    cur.stretches = []
                cur.stretches.append((cur.seg_start, cur.held_until, "lease"))
                cur.seg_start = op.end_time
                cur.held_until = op.time + held
            cur.expired_at = max(cur.expired_at, op.end_time + expire)
    for g in list(open_pl.values()):
        close(g, math.inf, "nothing")
    grants = [g for g in done if g is not None]
    return GrantTable(grants, write_grant, max_drift, writes, last_reads, no_lock)


# ---- reporting helpers shared by the checks ----

def seconds(ns: float) -> str:
    """ns since the run started as a short seconds figure: 12300000000 -> '12.3 s'."""
    if ns == math.inf:
        return "the end of the history"
    text = f"{ns / 1e9:.3f}".rstrip("0").rstrip(".")
    return f"{text} s"


def who(p: Process) -> str:
    return "the nemesis" if p == NEMESIS else f"process {p}"


def tok(token: int | None) -> str:
    return "no token" if token is None else f"token {token}"


@dataclass(slots=True)
class Collector:
    """Keeps the first MAX_REPORTED violations (by when they became evident) and counts all."""

    found: list[tuple[int, Violation]] = field(default_factory=list)
    by_kind: dict[str, int] = field(default_factory=dict)

    def add(self, at: int, kind: str, explanation: str, ops: tuple[OpRef, ...], *,
            lock: str | None = None, key: str | None = None, stale_grant: int | None = None,
            next_grant: int | None = None) -> None:
        """Record a violation that became evident at `at` ns (kept in the output as "time_ns").
        `stale_grant` is the grant whose going stale it follows from (its incident), and
        `next_grant` the grant that came after it, where known."""
        v = Violation(kind, explanation, ops, lock=lock, key=key, extra={"time_ns": at},
                      stale_grant=stale_grant, next_grant=next_grant)
        self.found.append((at, v))
        self.by_kind[kind] = self.by_kind.get(kind, 0) + 1

    @property
    def count(self) -> int:
        return len(self.found)

    def reported(self) -> list[Violation]:
        self.found.sort(key=lambda x: x[0])
        return [v for _, v in self.found[:MAX_REPORTED]]

    def details(self) -> dict[str, Any]:
        out: dict[str, Any] = {"count": self.count, "count_by_kind": dict(self.by_kind)}
        if self.found:
            out["first_violation_ns"] = min(at for at, _ in self.found)
        return out
