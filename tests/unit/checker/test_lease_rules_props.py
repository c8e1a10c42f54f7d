"""The lease rules of DESIGN.md, read plainly, agree with the checker on random small histories.

The reading below knows nothing of the checker's sweep: for every grant it takes the definition
word by word (exact fractions for lease x (1 - max_drift), epoch-sized integer times above 2^53),
and a double grant is any pair of grants of one lock whose surely-held stretches overlap. The
histories have renewals that shorten or lengthen the lease, late renewals, releases by other
processes with equal and repeated tokens, failed releases, retired processes (their last op was
info, the worker going on under a new id), `attempt_ns`, and times that land exactly on lease ends.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fencecheck.checker.verdict import judge, load

EPOCH = 1_764_547_200 * 10**9 + 123  # ns since 1970: far above 2^53, where floats round
UNIT = 10_000  # ns; lease ends (990_000 ns for 1 ms at 1 % drift) fall on whole units
DRIFTS = ("0.01", "0", "0.1", "0.25")
LEASES: tuple[Any, ...] = (1, 2, 5, 0.5, 0, 1.5)


@dataclass
class Rec:
    """One op as the generator made it: the truth the plain reading works from."""

    index: int  # invoke index
    process: int
    f: str
    type: str  # ok, fail, info, or "open" for an invoke never completed
    t0: int
    t1: int | None
    value: dict[str, Any]


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[Rec], str]:
    drift = draw(st.sampled_from(DRIFTS))
    specs: list[tuple[int, int, int | None, str, str, dict[str, Any]]] = []
    next_pid = 0
    for _worker in range(draw(st.integers(1, 3))):
        pid = next_pid
        next_pid += 1
        t = draw(st.integers(0, 60))
        for _ in range(draw(st.integers(1, 8))):
            f = draw(st.sampled_from(["acquire", "acquire", "renew", "release", "release",
                                      "write"]))
            typ = draw(st.sampled_from(["ok", "ok", "ok", "fail", "info"]))
            dur = draw(st.integers(0, 60))
            token = draw(st.sampled_from([None, 1, 2, 2, 2]))
            lock = draw(st.sampled_from(["a", "a", "b"]))
            if f == "acquire":
                value: dict[str, Any] = {"lock": lock, "lease_ms": draw(st.sampled_from(LEASES))}
                if typ == "ok":
                    value["token"] = token
                    if draw(st.booleans()):
                        value["attempt_ns"] = EPOCH + (t + draw(st.integers(0, dur))) * UNIT
            elif f == "renew":
                value = {"lock": lock, "token": token,
                         "lease_ms": draw(st.sampled_from(LEASES))}
            elif f == "release":
                value = {"lock": lock, "token": token}
            else:
                value = {"key": "k", "value": 1, "token": token, "lock": lock}
            t1: int | None = t + dur
            if typ == "info" and draw(st.booleans()):
                t1 = None  # never completed: counts as info
            specs.append((t, pid, t1, f, typ, value))
            if typ == "info":  # retired: the worker goes on under a new id
                pid = next_pid
                next_pid += 1
            t += dur + draw(st.integers(0, 30))
    events: list[tuple[int, int, int, str, str, dict[str, Any] | None]] = []
    for n, (t0, _pid, t1, f, typ, value) in enumerate(specs):
        inv = {k: v for k, v in value.items() if k not in ("token", "attempt_ns")} \
            if f == "acquire" else value
        events.append((t0, 0, n, "invoke", f, inv))
        if t1 is not None:
            done = {k: v for k, v in value.items() if k in ("token", "attempt_ns")} \
                if f == "acquire" and typ == "ok" else None
            events.append((t1, 1, n, typ, f, done))
    events.sort(key=lambda e: (e[0], e[2], e[1]))  # a completion before the next invoke
    lines: list[dict[str, Any]] = []
    invoke_index: dict[int, int] = {}
    for i, (t, _, n, typ, f, value) in enumerate(events):
        if typ == "invoke":
            invoke_index[n] = i
        pid = specs[n][1]
        lines.append({"index": i, "time": EPOCH + t * UNIT, "process": pid, "type": typ,
                      "f": f, "value": value})
    recs = [Rec(invoke_index[n], pid, f, typ if t1 is not None else "open", EPOCH + t0 * UNIT,
                None if t1 is None else EPOCH + t1 * UNIT, value)
            for n, (t0, pid, t1, f, typ, value) in enumerate(specs)]
    recs.sort(key=lambda r: r.index)
    return lines, recs, drift


def lease_end(start: int, lease_ms: Any, drift: str) -> int:
    """start + floor(lease_ms x 10^6 x (1 - max_drift)), exactly."""
    return start + math.floor(Fraction(lease_ms) * 10**6 * (1 - Fraction(drift)))


def plain_stretches(recs: list[Rec], drift: str) -> list[tuple[Rec, list[tuple[int, int | float]]]]:
    """Every grant with its surely-held stretches, from DESIGN.md's words."""
    last_type = {r.process: r.type for r in recs}  # recs in invoke order
    retired = {p for p, t in last_type.items() if t in ("info", "open")}
    out: list[tuple[Rec, list[tuple[int, int | float]]]] = []
    for g in recs:
        if g.f != "acquire" or g.type != "ok":
            continue
        assert g.t1 is not None
        lock, token = g.value["lock"], g.value.get("token")
        base = max(g.t0, g.value.get("attempt_ns", g.t0))
        end: int | float = lease_end(base, g.value["lease_ms"], drift)
        later = [r for r in recs if r.index > g.index and r.value.get("lock") == lock]
        mine = [r for r in later if r.process == g.process]
        # that process's next release or acquire invoke
        stop = next((r for r in mine if r.f in ("release", "acquire")), None)
        cut: int | float = stop.t0 if stop is not None else math.inf
        # a release by another process with this grant's token, this process being retired,
        # the release not failed
        if g.process in retired and token is not None:
            for r in later:
                if r.f == "release" and r.process != g.process and r.type != "fail" \
                        and r.value.get("token") == token:
                    cut = min(cut, r.t0)
        stretches: list[tuple[int, int | float]] = []
        start = g.t1
        for r in mine:
            if stop is not None and r.index > stop.index:
                break
            if r.f != "renew" or r.type != "ok":
                continue
            assert r.t1 is not None
            new_end = lease_end(r.t0, r.value["lease_ms"], drift)
            if r.t0 <= end:
                end = new_end  # its own invoke, its own lease: it can shorten
            elif r.t1 < new_end:  # cannot bridge the gap: a new stretch from its ok
                stretches.append((start, end))
                start, end = r.t1, new_end
        stretches.append((start, end))
        out.append((g, [(s, min(e, cut)) for s, e in stretches if s < min(e, cut)]))
    return out


@settings(max_examples=2000, deadline=None, derandomize=True)
@given(h=histories())
def test_mutex_agrees_with_the_plain_reading(
        h: tuple[list[dict[str, Any]], list[Rec], str]) -> None:
    lines, recs, drift = h
    ops = load(lines)
    results = judge(ops, max_drift=float(drift))
    plain = plain_stretches(recs, drift)
    double = any(
        g.value["lock"] == h2.value["lock"] and max(s1, s2) < min(e1, e2)
        for (g, sg), (h2, sh) in itertools.combinations(plain, 2)
        for s1, e1 in sg for s2, e2 in sh
    )
    assert (results.checks["mutex"].valid is False) == double
    # and every grant's stretches, to the ns
    from fencecheck.checker.grants import build_grants

    table = build_grants(ops, max_drift=float(drift))
    got = {g.acquire.index: [(s, e) for s, e, _ in g.held() if s < e] for g in table.grants}
    assert got == {g.index: st for g, st in plain}
