"""Unit tests of reports.timeline: held intervals, fault windows, lanes, availability."""

from __future__ import annotations

from typing import Any

import pytest

from fencecheck.checker.base import Op, Process
from fencecheck.reports.timeline import (
    assign_lanes,
    availability,
    fault_windows,
    held_intervals,
    percentile,
)

MS = 1_000_000


def mk(
    index: int,
    p: Process,
    f: str,
    t0_ms: float,
    t1_ms: float | None,
    typ: str = "ok",
    error: str | None = None,
    **value: Any,
) -> Op:
    return Op(
        process=p,
        f=f,
        type=typ,  # type: ignore[arg-type]
        index=index,
        time=int(t0_ms * MS),
        end_index=None if t1_ms is None else index + 1,
        end_time=None if t1_ms is None else int(t1_ms * MS),
        value=value or None,
        error=error,
    )


def test_released_grant_is_surely_held_until_release_invoke() -> None:
    ops = [
        mk(0, 0, "acquire", 10, 20, lock="L", lease_ms=1000, token=1),
        mk(2, 0, "release", 100, 110, lock="L", token=1),
    ]
    surely, possibly = held_intervals(ops)
    assert [(i.start_s, i.end_s) for i in surely] == [(0.020, 0.100)]
    assert [(i.start_s, i.end_s) for i in possibly] == [(0.010, 0.110)]


def test_paused_holder_lease_bounds_both_intervals() -> None:
    ops = [
        mk(0, 0, "acquire", 10, 20, lock="L", lease_ms=1000, token=1),
        mk(2, 0, "write", 3000, 3010, key="k", value=1, token=1, lock="L"),
    ]
    (s,), (p,) = held_intervals(ops)
    assert s.end_s == pytest.approx(0.010 + 0.99)  # invoke + lease*(1-drift)
    assert p.end_s == pytest.approx(0.020 + 1.01)  # completion + lease*(1+drift)


def test_unknown_acquire_is_only_possibly_held_and_failed_one_not_at_all() -> None:
    ops = [
        mk(0, 0, "acquire", 10, 500, "info", lock="L", lease_ms=100),
        mk(2, 1, "acquire", 20, 30, "fail", lock="L", lease_ms=100),
        mk(4, 2, "read", 2000, 2001, key="k"),
    ]
    surely, possibly = held_intervals(ops)
    assert surely == []
    assert [(i.process, i.start_s, round(i.end_s, 6)) for i in possibly] == [(0, 0.010, 0.601)]


def test_renew_extends_possibly_held_and_failed_release_keeps_it() -> None:
    ops = [
        mk(0, 0, "acquire", 0, 10, lock="L", lease_ms=100, token=1),
        mk(2, 0, "renew", 50, 60, lock="L", lease_ms=100, token=1),
        mk(4, 0, "release", 70, 80, "fail", error="x", lock="L", token=1),
        mk(6, 1, "read", 1000, 1001, key="k"),
    ]
    (s,), (p,) = held_intervals(ops)
    assert s.end_s == pytest.approx(0.070)  # the release invoke ends "surely"
    assert p.end_s == pytest.approx(0.060 + 0.101)  # renew completion + lease, release failed


def test_fault_windows_match_starts_and_stops_and_keep_unhealed() -> None:
    ops = [
        mk(0, "nemesis", "start-pause", 100, 110),
        mk(2, "nemesis", "start-partition", 150, 160, "fail", cut=["n1"]),
        mk(4, "nemesis", "stop-pause", 300, 305),
        mk(6, "nemesis", "start-kill", 400, 401, nodes=["n2"]),
        mk(8, 0, "read", 900, 1000, key="k"),
    ]
    ws = fault_windows(ops)
    assert ws[0].detail is None
    assert [(w.fault, w.start_s, w.end_s, w.healed) for w in ws] == [
        ("pause", 0.110, 0.305, True),
        ("kill", 0.401, 1.0, False),
    ]
    assert ws[1].detail == {"nodes": ["n2"]}


def test_lanes_pack_retired_processes_past_the_limit() -> None:
    # Worker w goes on under ids w, w+3, w+6, ...: lifetimes of one worker never overlap.
    ops = []
    i = 0
    for gen in range(4):
        for w in range(3):
            ops.append(mk(i, gen * 3 + w, "read", gen * 100 + w, gen * 100 + 50, "info"))
            i += 2
    assert len(assign_lanes(ops).labels) == 12
    lanes = assign_lanes(ops, max_lanes=5)
    assert len(lanes.labels) == 3
    assert len(set(lanes.of.values())) == 3
    for p in range(12):  # a worker's successive ids share its lane
        assert lanes.of[p] == lanes.of[p % 3]


def test_availability_splits_inside_and_outside_fault_windows() -> None:
    ops = [
        mk(0, "nemesis", "start-partition", 100, 100),
        mk(2, 0, "read", 50, 60, key="k"),
        mk(4, 0, "read", 150, 160, "fail", key="k"),
        mk(6, 1, "write", 160, None, "info", key="k"),
        mk(8, "nemesis", "stop-partition", 200, 200),
        mk(10, 2, "read", 250, 260, key="k"),
    ]
    rows = {r["f"]: r for r in availability(ops, fault_windows(ops))}
    assert rows["read"]["in"] == {"ok": 0, "fail": 1, "info": 0, "total": 1, "ok_frac": 0.0}
    assert rows["read"]["out"]["ok"] == 2 and rows["read"]["out"]["ok_frac"] == 1.0
    assert rows["write"]["in"]["info"] == 1 and rows["write"]["out"]["total"] == 0


def test_percentile_nearest_rank() -> None:
    values = [float(x) for x in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile([3.0], 0.99) == 3.0
    assert percentile([], 0.5) is None
