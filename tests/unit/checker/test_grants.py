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


def test_a_renewal_sets_the_end_from_its_own_invoke_and_lease_even_shorter() -> None:
    short = {"lock": "l", "token": 1, "lease_ms": 100}
    g = _only(_ops(_acq(0, 0, 10, lease=10_000), (0, "renew", "ok", 500, 520, short)))
    assert g.end == 500 * MS + 99 * MS  # not the acquire's 9.9 s


def test_a_release_by_a_live_other_process_or_a_failed_one_ends_no_other_grant() -> None:
    rel = {"lock": "l", "token": 1}
    live = _only(_ops(_acq(0, 0, 10, lease=None), (5, "release", "ok", 40, 50, rel)))
    assert live.end == math.inf  # process 0 is live: its worker did not send that release
    failed = _only(_ops(_acq(0, 0, 10, lease=None), (0, "write", "info", 20, 30, {"key": "k"}),
                        (5, "release", "fail", 40, 50, rel)))
    assert failed.end == math.inf
    own_failed = _only(_ops(_acq(0, 0, 10, lease=None), (0, "release", "fail", 40, 50, rel)))
    assert own_failed.end == 40 * MS  # its own release ends it at the invoke, whatever came of it


def test_attempt_ns_moves_the_lease_start_never_before_the_invoke() -> None:
    late = _only(_ops((0, "acquire", "ok", 0, 600, {"lock": "l", "lease_ms": 1000,
                                                     "token": 1, "attempt_ns": 500 * MS})))
    assert late.end == 500 * MS + 990 * MS
    early = _only(_ops((0, "acquire", "ok", 100, 600, {"lock": "l", "lease_ms": 1000,
                                                        "token": 1, "attempt_ns": 50 * MS})))
    assert early.end == 100 * MS + 990 * MS


def test_ends_are_exact_integers_above_2_to_the_53() -> None:
    t0 = 2**62 + 1
    op = Op(0, "acquire", "ok", 0, t0, 1, t0 + 5, {"lock": "l", "lease_ms": 1, "token": 1})
    (g,) = build_grants([op], max_drift=0.01).grants
    assert type(g.end) is int and g.end == t0 + 990_000
    (g,) = build_grants([op], max_drift=1 / 3).grants
    assert g.end == t0 + 666_666  # floor(10^6 x 2/3), max_drift read as written


def test_a_lease_that_is_not_a_finite_non_negative_number_is_refused() -> None:
    import pytest

    for bad in (float("nan"), -1, float("inf"), "1000", True):
        with pytest.raises(ValueError, match="lease_ms"):
            build_grants(_ops(_acq(0, 0, 10, lease=bad)))  # type: ignore[arg-type]
