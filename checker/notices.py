"""The `notices` check: when the lock libraries told their holders that a lock was lost, against
the grants' surely-held ends, and `write-after-notice`, a write accepted after its own process had
been told.

A notice (DESIGN.md's history format, `f: "notice"`, an invoke and its ok at one instant) is the
client's library telling the process that its lock `lock` is lost or in doubt. A notice is *about*
the grant g of its process on its lock that was current when it came: the latest grant of that
process and lock whose acquire completed ok at or before the notice, provided the process had not
invoked a release or another acquire of the lock before the notice (it had given g up: the notice
is news of nothing it holds), and provided the notice's token is null or g's (a notice naming
another token speaks of another grant). A notice about no grant is counted, never judged.

Per grant with a notice, its first notice against the grant's surely-held end by its lease
(checker.grants' rule: the last ok acquire or renew of g invoked at or before the notice, its
invoke + floor(lease_ms x 10^6 x (1 - max_drift)), from `attempt_ns` where an acquire gives one;
the process's own release is not an end here, since a holder that obeys the notice releases
because of it): `lead_ns` = that end - the notice's time. Positive, an early warning: the lock
was surely still held when the holder was told. Negative, a lag: the lease could have run out
that long before the holder heard. A grant with no lease (lease_ms null) gets no figure.

`write-after-notice`: an ok write of g (checker.grants' ownership: the writer's latest grant on
the write's lock) invoked strictly after g's first notice: the seed's "stop work as soon as the
lock is in doubt" broken, whatever any other holder did. One violation per grant, naming its
first such write and counting all. A write in flight when the notice came is none: the process
could not take it back; so is one at the notice's own instant (the order is not known).

Statistics (`details`): notices, notices about a grant, grants with a notice, the most notices
about one grant, the grants with a figure, leads and lags among them, and `median_lead_ns` (the
lower median: a time of the history, an integer; negative: a lag). Every time is integer ns.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median_low
from typing import Any

from fencecheck.checker.base import NEMESIS, CheckResult, Op, Process, op_ref
from fencecheck.checker.grants import (
    INF,
    MAX_REPORTED,
    Collector,
    GrantTable,
    LeaseMath,
    build_grants,
    seconds,
    tok,
    who,
)
from fencecheck.checker.registry import CheckSpec, KindSpec
from fencecheck.records.history import NOTICE

NAME = "notices"
KIND = "write-after-notice"


@dataclass(frozen=True, slots=True)
class Heard:
    """A grant's first notice, and how it fell against the grant's surely-held end."""

    grant: int  # grant id (checker.grants)
    notice: Op
    notices: int  # notices about this grant, this one included
    end_ns: int | None  # surely held until, by the lease, as of the notice (None: no lease)

    @property
    def lead_ns(self) -> int | None:
        """End - notice time: > 0 an early warning, < 0 a lag; None without a lease."""
        return None if self.end_ns is None else self.end_ns - self.notice.time

    def to_json(self) -> dict[str, Any]:
        n = self.notice
        return {"grant": self.grant, "process": n.process, "lock": n.get("lock"),
                "token": n.get("token"), "reason": n.get("reason", ""), "index": n.index,
                "time_ns": n.time, "surely_held_end_ns": self.end_ns, "lead_ns": self.lead_ns,
                "notices": self.notices}


@dataclass(slots=True)
class _Term:
    """One grant while its process holds it: its lease ends so far, by invoke time."""

    gid: int
    start: int
    invokes: list[int]  # invoke times of its ok acquire and leased ok renews, ascending
    ends: list[int | None]  # the surely-held end each of them set (None: the acquire's, no lease)
    given_up: int | float = INF  # the process's next acquire or release invoke on the lock


def _terms(ops: Sequence[Op], table: GrantTable) -> dict[tuple[Process, str], list[_Term]]:
    """Per (process, lock) its grants in order, each with its lease's ends and when it was
    given up (one pass in invoke order; a process's ops are sequential in it)."""
    lease = LeaseMath(table.max_drift)
    by_acquire = {g.acquire.index: g.id for g in table.grants}
    terms: dict[tuple[Process, str], list[_Term]] = {}
    current: dict[tuple[Process, str], _Term] = {}
    for op in ops:
        f = op.f
        if f not in ("acquire", "renew", "release") or op.process == NEMESIS:
            continue
        lock = op.get("lock")
        if type(lock) is not str:
            continue
        key = (op.process, lock)
        if f != "renew":
            cur = current.pop(key, None)
            if cur is not None:
                cur.given_up = op.time
            gid = by_acquire.get(op.index) if f == "acquire" else None
            if gid is None:
                continue
            g = table.grants[gid]
            ns = lease.ns(op.get("lease_ms"))
            attempt = op.get("attempt_ns")
            base = max(op.time, attempt) if type(attempt) is int else op.time
            cur = _Term(gid, g.start, [op.time], [None if ns is None else base + ns[0]])
            current[key] = cur
            terms.setdefault(key, []).append(cur)
        elif op.ok and (cur := current.get(key)) is not None:
            ns = lease.ns(op.get("lease_ms"))
            if ns is not None:
                cur.invokes.append(op.time)
                cur.ends.append(op.time + ns[0])
    return terms


def _end_as_of(term: _Term, at: int) -> int | None:
    """The surely-held end set by the last leased ok acquire/renew invoked at or before `at`."""
    i = bisect_right(term.invokes, at) - 1
    return term.ends[i] if i >= 0 else None


def heard(ops: Sequence[Op], table: GrantTable) -> dict[int, Heard]:
    """Grant id -> its first notice and the figures of it, for every grant a notice is about."""
    notices = [op for op in ops if op.f == NOTICE and op.ok and op.process != NEMESIS]
    if not notices:
        return {}
    terms = _terms(ops, table)
    starts = {key: [t.start for t in ts] for key, ts in terms.items()}
    out: dict[int, Heard] = {}
    for n in notices:
        term = _about(n, terms, starts, table)
        if term is None:
            continue
        # in invoke order, and a process's times never go back: its first is its earliest
        first = out.get(term.gid)
        out[term.gid] = (Heard(term.gid, n, 1, _end_as_of(term, n.time)) if first is None
                         else Heard(first.grant, first.notice, first.notices + 1, first.end_ns))
    return out


def _about(n: Op, terms: dict[tuple[Process, str], list[_Term]],
           starts: dict[tuple[Process, str], list[int]], table: GrantTable) -> _Term | None:
    lock = n.get("lock")
    key = (n.process, lock)
    ts = terms.get(key)
    if ts is None:
        return None
    i = bisect_right(starts[key], n.time) - 1
    if i < 0:
        return None
    term = ts[i]
    token = n.get("token")
    if n.time >= term.given_up or (type(token) is int and token != table.grants[term.gid].token):
        return None
    return term


def notices(ops: Sequence[Op], *, max_drift: float = 0.01,
            grants: GrantTable | None = None) -> CheckResult:
    """Lead/lag of the notices per grant, and `write-after-notice`s."""
    table = grants if grants is not None else build_grants(ops, max_drift=max_drift)
    told = heard(ops, table)
    total = sum(1 for op in ops if op.f == NOTICE and op.ok and op.process != NEMESIS)
    after: dict[int, list[Op]] = {}
    if told and table.tally is not None:
        for w in table.tally.granted_writes:
            h = told.get(table.write_grant[w.index])
            if h is not None and w.time > h.notice.time:
                after.setdefault(h.grant, []).append(w)
    found = Collector()
    for gid, writes in sorted(after.items()):
        g, n, w = table.grants[gid], told[gid].notice, min(writes, key=lambda o: o.time)
        more = f" (and {len(writes) - 1} more of its writes)" if len(writes) > 1 else ""
        reason = n.get("reason") or "no reason given"
        found.add(w.time, KIND,
                  f"{who(g.process).capitalize()} was told at {seconds(n.time)} that its lock "
                  f'"{g.lock}" ({tok(g.token)}) was lost or in doubt ({reason}), and its write '
                  f"invoked at {seconds(w.time)} was accepted{more}",
                  (g.ref, op_ref(n), op_ref(w)), lock=g.lock, key=w.get("key"),
                  stale_grant=gid)
    details = found.details()
    details.update(_figures(told, total))
    if total == 0:
        return CheckResult(NAME, True, skipped="the history has no notices", details=details)
    return CheckResult(NAME, found.count == 0, found.reported(), details=details)


def _figures(told: dict[int, Heard], total: int) -> dict[str, Any]:
    leads = [h.lead_ns for h in told.values() if h.lead_ns is not None]
    return {
        "notices": total,
        "notices_about_a_grant": sum(h.notices for h in told.values()),
        "grants_with_notice": len(told),
        "most_notices_per_grant": max((h.notices for h in told.values()), default=0),
        "grants_with_lead": len(leads),
        "leads": sum(1 for x in leads if x >= 0),
        "lags": sum(1 for x in leads if x < 0),
        "median_lead_ns": median_low(leads) if leads else None,
        "per_grant": [h.to_json() for _, h in sorted(told.items())[:MAX_REPORTED]],
    }


CHECK = CheckSpec(
    name=NAME,
    kinds=(
        KindSpec(KIND,
                 "a write accepted after its own process was told its lock was lost "
                 "(a lost-lock notice)",
                 "write"),
    ),
    run=lambda ops, table: notices(ops, grants=table),
    applies=lambda table: table.tally is not None and NOTICE in table.tally.per_f,
    order=60,
)
