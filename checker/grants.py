"""The lease model the lock checks share: grants, their surely-held intervals, write ownership.

DESIGN.md, in its words: per lock, a *grant* g is an acquire that completed ok. It is surely held
from g.ok until g.end = the earliest of: that process's next release or acquire invoke, and the
last successful acquire-or-renew *invoke* time + lease_ms x (1 - max_drift). The lease cannot have
started before the invoke, so until then the service must consider it held. The rules in full
(each keeps a check silent where the evidence is uncertain):

- A renew that completed ok sets the end from *its own* invoke time and *its own* lease_ms (it can
  shorten the lease). A renew invoked after the surely-held end cannot bridge the gap: it starts
  a new stretch from its ok (a further stretch, in `Grant.segments`).
- Where an acquire's ok value carries `attempt_ns` (controller-clock time the winning attempt was
  sent, for clients that retry inside one acquire), the end counts from max(invoke, attempt_ns).
- A release ends its own process's surely-held stretch at its invoke, whatever its outcome. It
  ends a grant of *another* process only when that process is retired (its last op was `info`;
  the worker goes on under a new id) and the release carried that grant's token. A failed
  release, or one by a live other process, ends no one else's grant.
- Times are integers in ns and every computation on them is exact (no floats): the end is
  invoke + floor(lease_ms x 10^6 x (1 - max_drift)), with max_drift read as the decimal it was
  written as (0.01 is 1/100, not the nearest binary float).

Built in the same pass (checker.tally): each key's accepted writes as columns, and the counts of
the statistics. The helpers the checks word and cap their findings with (`Collector`,
`seconds`, `who`, `tok`) are checker.findings', re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import msgspec

from fencecheck.checker.base import NEMESIS, Op, OpRef, Process, op_ref
from fencecheck.checker.findings import MAX_REPORTED as MAX_REPORTED
from fencecheck.checker.findings import Collector as Collector
from fencecheck.checker.findings import seconds as seconds
from fencecheck.checker.findings import tok as tok
from fencecheck.checker.findings import who as who
from fencecheck.checker.reader import HOT_KEYS
from fencecheck.checker.rwpass import PassState, job_key, rw_pass
from fencecheck.checker.tally import OpTally, WriteColumns

NS_PER_MS = 1_000_000
INF = math.inf  # an end nothing in the history gives; every finite end is an int


class Grant(msgspec.Struct, frozen=True, gc=False):
    """One ok acquire of one lock, with the interval it was surely held. (A msgspec Struct: a
    frozen dataclass sets each field through object.__setattr__, a tenth of the grant table's
    time on a million-event history.)"""

    id: int
    lock: str
    process: Process
    acquire: Op
    token: int | None
    start: int  # the acquire's ok time (ns)
    end: int | float  # surely held until (ns, an int); math.inf: nothing in the history ends it
    ended_by: str  # "release", "acquire", "release-by-token", "lease" or "nothing"
    expired_at: int | float  # surely expired: last ok acquire/renew ok + ceil(lease*(1+drift))
    # further surely-held stretches, after renewals that came too late to bridge the lease:
    # (start ns, end ns, ended_by); `end`/`ended_by` above are of the first stretch
    segments: tuple[tuple[int, int | float, str], ...] = ()

    def held(self) -> list[tuple[int, int | float, str]]:
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
    job_writes: int = 0  # writes that execute a cron job (checker.jobs.job_id is not None)
    acquire_ops: int = 0  # acquires of any outcome, and those of them with a lease
    acquires_with_lease: int = 0
    # what checker.careless may name: refused renews, ok ones with its evidence (deleted_token,
    # extended_token, lease_ttl_s); and lock ops with a library's "evidence" (checker.steps)
    steps: list[Op] = field(default_factory=list)
    columns: dict[str, WriteColumns] = field(default_factory=dict)  # by key, see write_columns
    # a grant whose ok time is before its invoke's (only a hand-made history has one)
    granted_before_invoke: bool = True
    nemesis_ops: list[Op] | None = None  # the nemesis' ops
    tally: OpTally | None = None


def write_columns(table: GrantTable, key: str) -> WriteColumns:
    """The columns of one key's accepted writes."""
    return table.columns[key]


class _Open(msgspec.Struct, gc=False):
    """A grant still open in build_grants' pass. (A msgspec Struct: made in C, where a slots
    dataclass runs its __init__ in Python; a million-event history opens 60,000. Untracked by the
    cyclic GC: it refers to an op and to tuples of numbers, never back to itself.)"""

    id: int
    lock: str
    process: Process
    acquire: Op
    token: int | None
    held_until: int | float
    expired_at: int | float
    seg_start: int = 0  # start of the current stretch
    stretches: list[tuple[int, int | float, str]] | None = None  # the stretches closed by a gap


def drift_fraction(max_drift: float | Fraction) -> Fraction:
    """max_drift exactly as written: 0.01 -> 1/100 (its repr is the shortest decimal)."""
    if isinstance(max_drift, Fraction):
        return max_drift
    return Fraction(repr(float(max_drift)))


class LeaseMath:
    """Exact lease lengths in ns for one max_drift, cached per lease_ms (runs use a few)."""

    def __init__(self, max_drift: float | Fraction) -> None:
        d = drift_fraction(max_drift)
        self.short = (1 - d) * NS_PER_MS
        self.long = (1 + d) * NS_PER_MS
        self.cache: dict[Any, tuple[int, int] | None] = {}

    def ns(self, lease_ms: Any) -> tuple[int, int] | None:
        """(surely-held ns, surely-expired ns) of a lease, or None for no lease (null/absent).
        Raises ValueError on a lease that is not a finite non-negative number."""
        try:
            return self.cache[lease_ms]
        except KeyError:
            pass
        except TypeError:  # unhashable: not a number
            raise ValueError(f"lease_ms must be a number, not {lease_ms!r}") from None
        if lease_ms is None:
            out = None
        elif isinstance(lease_ms, bool) or not isinstance(lease_ms, int | float) \
                or not (isinstance(lease_ms, int) or math.isfinite(lease_ms)) or lease_ms < 0:
            raise ValueError(f"lease_ms must be a finite non-negative number, not {lease_ms!r}")
        else:
            ms = Fraction(lease_ms)
            out = (math.floor(ms * self.short), math.ceil(ms * self.long))
        if len(self.cache) < 4096:
            self.cache[lease_ms] = out
        return out


def retired_processes(ops: Sequence[Op]) -> set[Process]:
    """Processes whose last op was `info` (or never completed): the worker went on under a new
    id. `ops` in invoke order, so a process's last op is its last in the list."""
    # a notice may come while the op that retired its process was in flight: not its last op
    last = {op.process: op.type for op in ops if op.f != "notice"}
    return {p for p, t in last.items() if t == "info" and p != NEMESIS}


def build_grants(ops: Sequence[Op], *, max_drift: float = 0.01) -> GrantTable:
    """One pass over ops in invoke order (each process's ops are sequential in it).

    Reads, writes and the nemesis' ops, most ops, are checker.rwpass' (in C where it is built);
    every other op, the lock operations, is `lock_op`'s below, called from that pass in order. A
    grant that no late renewal split is closed without building its list of stretches."""
    lease = LeaseMath(max_drift)
    # msgspec's own key strings: a lookup stops at the identity test (reader.decoded_keys)
    _, lock_, token_, lease_ms_, attempt_ns_, _ = HOT_KEYS
    lease_cache = lease.cache
    retired: set[Process] | None = None  # found on first need: releases across processes are rare
    done: list[Grant | None] = []
    open_pl: dict[tuple[Process, Any], _Open] = {}
    # open grants by (lock, token): a release with the token may end them (if their process
    # is retired)
    open_token: dict[tuple[Any, int], list[_Open]] = {}
    st = PassState()
    per_f, last_pl = st.per_f, st.last_pl
    granted_before_invoke = False
    steps: list[Op] = []
    no_lock = acquire_ops = leased = 0

    def close(g: _Open, at: int | float, by: str) -> None:
        if at < g.held_until:
            end = at
        else:
            end, by = g.held_until, ("lease" if g.held_until < INF else "nothing")
        if g.stretches is None:  # no late renewal split it: one stretch (most grants)
            done[g.id] = Grant(g.id, g.lock, g.process, g.acquire, g.token, g.seg_start, end, by,
                               g.expired_at)
        else:
            last = (g.seg_start, end, by)
            # a release by another process may come before earlier stretches ended: clip them
            stretches = [(s, e, b) if e <= at else (s, at, by) for s, e, b in g.stretches]
            first, *rest = [*stretches, last]
            done[g.id] = Grant(g.id, g.lock, g.process, g.acquire, g.token, first[0], first[1],
                               first[2], g.expired_at, tuple(rest))
        if g.token is not None:
            same = open_token.get((g.lock, g.token))
            if same is not None:
                if len(same) == 1 and same[0] is g:
                    del open_token[(g.lock, g.token)]
                elif g in same:
                    same.remove(g)

    def lock_op(op: Op) -> None:
        nonlocal retired, granted_before_invoke, no_lock, acquire_ops, leased
        f, t, p, end, v = op.f, op.type, op.process, op.end_time, op.value
        per_f[f] = per_f.get(f, 0) + 1
        if ((f == "renew" or f == "release") and (
                (t == "fail" and f == "renew") or (t == "ok" and v is not None and (
                    "deleted_token" in v or "extended_token" in v or "lease_ttl_s" in v)))) or (
                v is not None and "evidence" in v):
            steps.append(op)  # what checker.careless and .steps index: refused renews, evidence
        if v is None:
            return
        if f == "acquire" or f == "release":
            if f == "acquire":
                acquire_ops += 1
                if v.get(lease_ms_) is not None:
                    leased += 1
            lock = v.get(lock_)
            if type(lock) is not str:
                no_lock += f == "acquire"
                return
            key = (p, lock)
            cur = open_pl.pop(key, None)
            if cur is not None:
                close(cur, op.time, f)
            tk = v.get(token_)
            if type(tk) is not int:
                tk = None
            if f == "release":
                if tk is not None and t != "fail":
                    same_token = open_token.get((lock, tk))
                    for other in list(same_token or ()):
                        if other.process != p:
                            if retired is None:
                                retired = retired_processes(ops)
                            if other.process in retired:
                                del open_pl[(other.process, lock)]
                                close(other, op.time, "release-by-token")
            elif t == "ok":
                lease_ms = v.get(lease_ms_)
                try:
                    ns = lease_cache[lease_ms]
                except (KeyError, TypeError):  # a new length (or not a number: ns says why)
                    ns = lease.ns(lease_ms)
                assert end is not None  # an ok op has completed
                attempt = v.get(attempt_ns_)
                begin = op.time
                base = max(begin, attempt) if type(attempt) is int else begin
                if end < begin:
                    granted_before_invoke = True
                g = _Open(len(done), lock, p, op, tk,
                          INF if ns is None else base + ns[0],
                          INF if ns is None else end + ns[1], end)
                done.append(None)
                open_pl[key] = g
                last_pl[key] = g.id
                if tk is not None:
                    same = open_token.get((lock, tk))
                    if same is None:
                        open_token[(lock, tk)] = [g]
                    else:
                        same.append(g)
        elif f == "renew" and t == "ok":
            rlock = v.get(lock_)
            cur = open_pl.get((p, rlock)) if type(rlock) is str else None
            if cur is None:
                return
            lease_ms = v.get(lease_ms_)
            try:
                ns = lease_cache[lease_ms]
            except (KeyError, TypeError):
                ns = lease.ns(lease_ms)
            if ns is None:
                return  # a renewal of unknown length proves nothing about the end
            assert end is not None
            begin = op.time
            new_end = begin + ns[0]
            if begin <= cur.held_until:
                cur.held_until = new_end  # its own lease, from its own invoke: may shorten
            elif end < new_end:
                # too late to bridge: a new stretch from the renewal's ok
                if cur.stretches is None:
                    cur.stretches = []
                cur.stretches.append((cur.seg_start, cur.held_until, "lease"))
                cur.seg_start = end
                cur.held_until = new_end
            cur.expired_at = max(cur.expired_at, end + ns[1])

    last_end, reads, n_writes, rejected, jobs = rw_pass(ops, lock_op, st)
    writes = st.writes
    if reads:
        per_f["read"] = reads
    if n_writes:
        per_f["write"] = n_writes
    for g in list(open_pl.values()):
        close(g, INF, "nothing")
    jobs += sum(len(ws) for k, ws in writes.items() if job_key(k))
    grants = [g for g in done if g is not None]
    return GrantTable(grants, st.write_grant, max_drift, writes, st.last_reads, no_lock, jobs,
                      acquire_ops, leased, steps, st.columns, granted_before_invoke,
                      st.nemesis_ops, OpTally(per_f, st.not_ok, st.processes, st.unfinished,
                                             st.granted_writes, last_end, rejected,
                                             st.granted_times, st.granted_gids))
