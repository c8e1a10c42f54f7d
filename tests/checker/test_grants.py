"""The lease model (checker.grants): when a grant is surely held, and which grant a write is of."""

from __future__ import annotations

import math
from typing import Any

from fencecheck.checker.base import Op
from fencecheck.checker.grants import Grant, build_grants, seconds

MS = 1_000_000


def _ops(*spec: tuple[Any, ...]) -> list[Op]:
    """(process, f, type, invoke ms, complete ms, value) -> ops in invoke order."""
    rows = sorted(spec, key=lambda s: s[3])
    return [Op(p, f, t, i, int(t0 * MS), 1000 + i, int(t1 * MS), v)
            for i, (p, f, t, t0, t1, v) in enumerate(rows)]


def _acq(p: int, t0: float, t1: float, token: int | None = 1, lease: int | None = 1000,
         type_: str = "ok", lock: str = "l") -> tuple[Any, ...]:
    return (p, "acquire", type_, t0, t1, {"lock": lock, "lease_ms": lease, "token": token})


def _only(ops: list[Op]) -> Grant:
    (g,) = build_grants(ops).grants
    return g


def test_release_invoke_ends_the_grant() -> None:
    g = _only(_ops(_acq(0, 0, 10), (0, "release", "ok", 300, 400, {"lock": "l", "token": 1})))
    assert (g.start, g.end, g.ended_by) == (10 * MS, 300 * MS, "release")


def test_lease_ends_the_grant_counted_from_the_invoke_less_drift() -> None:
    g = _only(_ops(_acq(0, 100, 110)))
    assert g.end == 100 * MS + 1000 * MS * 0.99
    assert g.ended_by == "lease"
    assert g.expired_at == 110 * MS + 1000 * MS * 1.01
    assert build_grants(_ops(_acq(0, 100, 110)), max_drift=0.0).grants[0].end == 1100 * MS


def test_renewal_extends_only_when_ok_and_in_time() -> None:
    renew = {"lock": "l", "token": 1, "lease_ms": 1000}
    ok = _only(_ops(_acq(0, 0, 10), (0, "renew", "ok", 500, 520, renew)))
    assert ok.end == 500 * MS + 990 * MS
    failed = _only(_ops(_acq(0, 0, 10), (0, "renew", "fail", 500, 520, renew)))
    assert failed.end == 990 * MS
    info = _only(_ops(_acq(0, 0, 10), (0, "renew", "info", 500, 520, renew)))
    assert info.end == 990 * MS
    late = _only(_ops(_acq(0, 0, 10), (0, "renew", "ok", 995, 1000, renew)))
    assert late.end == 990 * MS  # may have lapsed in between: not surely held after 0.99 s
    assert late.segments == ((1000 * MS, 995 * MS + 990 * MS, "lease"),)  # held again from ok
    assert late.expired_at == 1000 * MS + 1010 * MS  # surely expired only after the renewal
    released = _only(_ops(_acq(0, 0, 10), (0, "renew", "ok", 995, 1000, renew),
                          (0, "renew", "ok", 1500, 1510, renew),
                          (0, "release", "ok", 1600, 1610, {"lock": "l", "token": 1})))
    assert released.held() == [(10 * MS, 990 * MS, "lease"), (1000 * MS, 1600 * MS, "release")]
    chain = _only(_ops(_acq(0, 0, 10), (0, "renew", "ok", 900, 950, renew),
                       (0, "renew", "ok", 1800, 1850, renew)))
    assert chain.end == 1800 * MS + 990 * MS


def test_no_lease_and_no_release_is_held_to_the_end() -> None:
    g = _only(_ops(_acq(0, 0, 10, lease=None)))
    assert (g.end, g.ended_by) == (math.inf, "nothing")
    assert "end of the history" in seconds(g.end)


def test_next_acquire_of_the_same_lock_ends_the_grant_other_locks_do_not() -> None:
    gs = build_grants(_ops(_acq(0, 0, 10), _acq(0, 20, 30, lock="other", token=7),
                           _acq(0, 50, 60, type_="fail", token=None))).grants
    assert [(g.lock, g.end, g.ended_by) for g in gs] == [
        ("l", 50 * MS, "acquire"), ("other", 20 * MS + 990 * MS, "lease")]


def test_release_with_the_token_by_another_process_ends_the_grant() -> None:
    rel = {"lock": "l", "token": 1}
    g = _only(_ops(_acq(0, 0, 10, lease=None), (0, "write", "info", 20, 30, {"key": "k"}),
                   (5, "release", "ok", 40, 50, rel)))
    assert (g.end, g.ended_by) == (40 * MS, "release-by-token")
    other = _only(_ops(_acq(0, 0, 10, lease=None), (5, "release", "ok", 40, 50,
                                                     {"lock": "l", "token": 2})))
    assert other.end == math.inf


def test_a_write_belongs_to_its_process_latest_grant_on_its_lock() -> None:
    w = {"key": "k", "value": 1, "token": 1, "lock": "l"}
    ops = _ops(_acq(0, 0, 10, token=1), (0, "write", "ok", 20, 30, w),
               (0, "release", "ok", 40, 50, {"lock": "l", "token": 1}),
               (0, "write", "ok", 60, 70, w),  # after its release: still of that grant
               _acq(0, 80, 90, type_="fail", token=None),
               (0, "write", "ok", 100, 110, w),  # a failed acquire takes nothing over
               _acq(0, 120, 130, token=2),
               (0, "write", "ok", 140, 150, w),
               (1, "write", "ok", 160, 170, w))  # never acquired: of no grant
    table = build_grants(ops)
    writes = [o.index for o in ops if o.f == "write"]
    assert [table.write_grant.get(i) for i in writes] == [0, 0, 0, 1, None]
