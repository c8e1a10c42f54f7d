"""The `notices` check: lost-lock notices against the grants' surely-held ends, and
`write-after-notice`; examples from its definition (checker/notices.py), the pairing of a notice
that comes while an op is in flight, and a brute-force reading of the definition on generated
histories."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fencecheck.checker.analyze import analyze
from fencecheck.checker.base import HistoryError, Op
from fencecheck.checker.grants import build_grants
from fencecheck.checker.history import load_ops
from fencecheck.checker.notices import KIND, notices
from fencecheck.checker.reader import line_schema

MS = 1_000_000


def _op(p: int, f: str, t0_ms: float, t1_ms: float, value: dict[str, Any], type_: str = "ok",
        i: list[int] = [0]) -> Op:  # noqa: B006 (a counter for the indexes)
    i[0] += 2
    return Op(p, f, type_, i[0], int(t0_ms * MS), i[0] + 1, int(t1_ms * MS), value)  # type: ignore[arg-type]


def _notice(p: int, t_ms: float, token: int | None = None, lock: str = "L",
            reason: str = "LOST") -> Op:
    return _op(p, "notice", t_ms, t_ms, {"lock": lock, "token": token, "reason": reason})


def _grant(p: int, t_ms: float, token: int, lease_ms: int = 1000) -> Op:
    return _op(p, "acquire", t_ms, t_ms + 1, {"lock": "L", "lease_ms": lease_ms, "token": token})


def _write(p: int, t0: float, t1: float, token: int, type_: str = "ok") -> Op:
    return _op(p, "write", t0, t1, {"key": "L", "value": 1, "token": token, "lock": "L"}, type_)


def test_an_early_notice_and_no_write_after_it_is_valid_with_its_lead() -> None:
    ops = [_grant(1, 0, 5), _write(1, 10, 20, 5), _notice(1, 500, 5),
           _op(1, "release", 510, 520, {"lock": "L", "token": 5})]
    r = notices(ops)
    assert r.valid is True
    # surely held until the acquire's invoke + floor(1000 ms x 0.99), whatever the release did
    assert r.details["median_lead_ns"] == 990 * MS - 500 * MS
    assert r.details["per_grant"][0]["lead_ns"] == 490 * MS
    assert (r.details["leads"], r.details["lags"], r.details["notices"]) == (1, 0, 1)


def test_a_write_invoked_after_its_own_notice_is_a_violation() -> None:
    ops = [_grant(1, 0, 5), _notice(1, 1200, 5, reason="SUSPENDED"), _write(1, 1300, 1310, 5),
           _write(1, 1400, 1410, 5), _grant(2, 1500, 6)]
    r = notices(ops)
    assert r.valid is False
    [v] = r.violations
    assert v.kind == KIND and v.stale_grant == 0
    assert [o.f for o in v.ops] == ["acquire", "notice", "write"]
    assert "SUSPENDED" in v.explanation and "1 more" in v.explanation
    assert r.details["median_lead_ns"] == 990 * MS - 1200 * MS  # a lag of 210 ms
    assert r.details["lags"] == 1


def test_a_write_in_flight_when_the_notice_came_is_none() -> None:
    ops = [_grant(1, 0, 5), _write(1, 400, 600, 5), _notice(1, 500, 5)]
    assert notices(ops).valid is True
    # at the notice's own instant the order is not known: silent too
    assert notices([_grant(1, 0, 5), _notice(1, 500, 5), _write(1, 500, 510, 5)]).valid is True


@pytest.mark.parametrize(("notice", "why"), [
    (_notice(1, 500, 7), "names another grant's token"),
    (_notice(1, 700), "came after its process released the lock"),
    (_notice(2, 500, 5), "came to a process that held nothing"),
    (_notice(1, 500, 5, lock="M"), "is about another lock"),
])
def test_a_notice_about_no_grant_is_counted_never_judged(notice: Op, why: str) -> None:
    ops = sorted([_grant(1, 0, 5), notice, _op(1, "release", 600, 610, {"lock": "L", "token": 5}),
                  _write(1, 800, 810, 5)], key=lambda o: o.time)
    r = notices(ops)
    assert r.valid is True, why
    assert (r.details["notices"], r.details["grants_with_notice"]) == (1, 0), why


def test_a_renewal_before_the_notice_moves_the_end_and_one_after_it_does_not() -> None:
    ops = [_grant(1, 0, 5), _op(1, "renew", 300, 310, {"lock": "L", "token": 5, "lease_ms": 1000}),
           _notice(1, 500, 5), _op(1, "renew", 600, 610, {"lock": "L", "token": 5,
                                                        "lease_ms": 1000})]
    assert notices(ops).details["median_lead_ns"] == (300 + 990 - 500) * MS


def test_a_history_without_notices_is_skipped() -> None:
    r = notices([_grant(1, 0, 5)])
    assert r.skipped and r.valid is True
    # and analyze does not run it at all
    assert "notices" not in analyze([_grant(1, 0, 5)]).checks


def _lines(events: list[tuple[int, Any, str, str, dict[str, Any] | None]]) -> str:
    return "".join(json.dumps({"index": i, "time": t, "process": p, "type": ty, "f": f,
                               "value": v}) + "\n" for i, (t, p, ty, f, v) in enumerate(events))


def test_a_notice_pairs_while_its_process_has_an_op_in_flight(tmp_path: Path) -> None:
    n = {"lock": "L", "token": 5, "reason": "LOST"}
    w = {"key": "L", "value": 1, "token": 5, "lock": "L"}
    path = tmp_path / "history.jsonl"
    path.write_text(_lines([
        (0, 1, "invoke", "acquire", {"lock": "L", "lease_ms": 1000}),
        (1, 1, "ok", "acquire", {"lock": "L", "lease_ms": 1000, "token": 5}),
        (2, 1, "invoke", "write", w), (3, 1, "invoke", "notice", n), (3, 1, "ok", "notice", n),
        (4, 1, "ok", "write", w), (5, 1, "invoke", "write", w), (6, 1, "ok", "write", w)]))
    ops = load_ops(path)
    assert [(o.f, o.type, o.index, o.end_index) for o in ops] == [
        ("acquire", "ok", 0, 1), ("write", "ok", 2, 5), ("notice", "ok", 3, 4),
        ("write", "ok", 6, 7)]
    r = analyze(ops)
    assert r.checks["notices"].valid is False
    assert r.incidents and r.incidents[0]["kinds"] == [KIND]


@pytest.mark.parametrize(("events", "what"), [
    ([(0, 1, "invoke", "notice", {"lock": "L"}), (0, 1, "invoke", "notice", {"lock": "L"})],
     "invokes notice while its notice"),
    ([(0, 1, "invoke", "write", {"key": "L"}), (1, 1, "ok", "write", None),
      (2, 1, "ok", "notice", {"lock": "L"})], "without an invoke"),
    ([(0, 1, "invoke", "notice", {"token": 1})], "value.lock: missing"),
    ([(0, 1, "invoke", "notice", {"lock": "L", "reason": 3}),
      (0, 1, "ok", "notice", None)], "value.reason: must be a string"),
])
def test_bad_notices_are_named(tmp_path: Path, events: list[Any], what: str) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text(_lines(events))
    with pytest.raises(HistoryError, match=what):
        load_ops(path)


def test_the_history_schema_has_the_notice() -> None:
    text = json.dumps(line_schema())
    assert '"const": "notice"' in text and '"reason"' in text


# ---- against a brute-force reading of the definition ----

@st.composite
def histories(draw: st.DrawFn) -> list[Op]:
    """Per process acquires, renews, releases, writes and notices (notices at any time, also
    while an op is in flight), random tokens, durations and leases."""
    rows: list[tuple[int, int, int, str, str, dict[str, Any]]] = []
    for p in range(draw(st.integers(1, 3))):
        t = draw(st.integers(0, 10))
        for _ in range(draw(st.integers(1, 12))):
            f = draw(st.sampled_from(["acquire", "write", "write", "renew", "release", "notice",
                                      "notice"]))
            lock = draw(st.sampled_from(["a", "a", "b"]))
            # a notice names no token more often than not, so that it is about a grant
            token = draw(st.one_of(st.none(), st.integers(0, 4)) if f != "notice" else
                         st.sampled_from([None, None, None, 0, 1, 2]))
            dur = 0 if f == "notice" else draw(st.integers(0, 6))
            type_ = "ok" if f == "notice" else draw(st.sampled_from(["ok", "ok", "fail"]))
            lease = draw(st.sampled_from([None, 3, 10, 20]))
            value: dict[str, Any] = {"lock": lock, "token": token}
            if f in ("acquire", "renew"):
                value["lease_ms"] = lease
            elif f == "write":
                value.update(key=lock, value=1)
            elif f == "notice":
                value["reason"] = "x"
            if f == "notice" and rows and draw(st.booleans()):
                start = max(rows[-1][0], t - dur - draw(st.integers(0, 3)))  # inside the last op
                rows.append((start, start, p, f, type_, value))
                continue
            rows.append((t, t + dur, p, f, type_, value))
            t += dur + draw(st.integers(0, 4))
    rows.sort(key=lambda r: r[0])
    return [Op(p, f, type_, i, t0 * MS, 10_000 + i, t1 * MS, v)  # type: ignore[arg-type]
            for i, (t0, t1, p, f, type_, v) in enumerate(rows)]


def _brute(ops: list[Op]) -> tuple[set[int], dict[int, int | None]]:
    """(grants with a write after their first notice, grant -> lead_ns), by the definition."""
    grants = build_grants(ops).grants
    first: dict[int, Op] = {}
    for n in ops:
        if n.f != "notice" or not n.ok:
            continue
        mine = [g for g in grants if g.process == n.process and g.lock == n.get("lock")
                and g.start <= n.time]
        if not mine:
            continue
        g = max(mine, key=lambda g: (g.start, g.acquire.index))
        gave = [o.time for o in ops if o.process == g.process and o.get("lock") == g.lock
                and o.f in ("acquire", "release") and o.index > g.acquire.index]
        if n.time >= min(gave, default=math.inf):
            continue
        if type(n.get("token")) is int and n.get("token") != g.token:
            continue
        if g.id not in first or (n.time, n.index) < (first[g.id].time, first[g.id].index):
            first[g.id] = n
    leads: dict[int, int | None] = {}
    for gid, n in first.items():
        g = grants[gid]
        stop = min([o.index for o in ops if o.process == g.process and o.get("lock") == g.lock
                    and o.f in ("acquire", "release") and o.index > g.acquire.index],
                   default=math.inf)
        setters = [o for o in ops if o.process == g.process and o.get("lock") == g.lock
                   and g.acquire.index < o.index < stop and o.f == "renew" and o.ok
                   and o.get("lease_ms") is not None and o.time <= n.time]
        last = max(setters, key=lambda o: o.index) if setters else g.acquire
        lease = last.get("lease_ms")
        leads[gid] = (None if lease is None else
                      last.time + math.floor(Fraction(lease) * MS * Fraction(99, 100)) - n.time)

    def owner(w: Op) -> int | None:
        mine = [g for g in grants if g.process == w.process and g.lock == w.get("lock")
                and g.acquire.index < w.index]
        return max(mine, key=lambda g: g.acquire.index).id if mine else None

    broke = {gid for w in ops if w.f == "write" and w.ok
             for gid in [owner(w)] if gid in first and w.time > first[gid].time}
    return broke, leads


@settings(max_examples=150, deadline=None)
@given(ops=histories())
def test_the_check_matches_brute_force(ops: list[Op]) -> None:
    r = notices(ops)
    broke, leads = _brute(ops)
    assert {v.stale_grant for v in r.violations} == broke
    assert (r.valid is False) == bool(broke)
    assert {e["grant"]: e["lead_ns"] for e in r.details.get("per_grant", [])} == leads
