"""What a run report draws, computed from ops: lock intervals, lanes, fault windows, tables.

Pure functions over `checker.base.Op`s, times in seconds since the run started.
- surely-held: the checker's grant interval (`checker.grants`, DESIGN.md): from the grant's ok
  to the earliest of the process's next release/acquire invoke and the lease's surely-held end.
- possibly-held: from the acquire's invoke to the release's completion, or to the latest moment the
  lease could last (last ok/unknown acquire-or-renew completion + lease), or to the end of the
  history when unknown (lease_ms*(1+max_drift), for clock drift). A failed acquire holds nothing.
- fault windows: from a nemesis `start-<fault>` completion to the matching `stop-<fault>`
  completion (or the end of the history).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fencecheck.checker.base import NEMESIS, Op, Process
from fencecheck.checker.grants import build_grants

NS = 1e9
CLIENT_FS = ("acquire", "renew", "release", "read", "write")
MAX_LANES = 40  # above this many processes, retired processes share lanes


@dataclass(frozen=True, slots=True)
class Interval:
    process: Process
    lock: str
    token: int | None
    start_s: float
    end_s: float
    index: int  # the acquire's invoke index


@dataclass(frozen=True, slots=True)
class Window:
    fault: str
    start_s: float
    end_s: float
    index: int  # the start op's invoke index
    healed: bool  # False when no stop completed before the end of the history
    detail: dict[str, Any] | None = None  # the start op's value: which nodes, which cut


@dataclass(frozen=True, slots=True)
class Lanes:
    of: dict[Process, int]  # process -> lane number (0-based)
    labels: tuple[str, ...]


def history_end_ns(ops: Sequence[Op]) -> int:
    """The time of the history's last event."""
    end = 0
    for op in ops:
        t = op.end_time if op.end_time is not None else op.time
        if t > end:
            end = t
    return end


def _lease_ns(op: Op) -> float | None:
    lease = op.get("lease_ms")
    return float(lease) * 1e6 if isinstance(lease, (int, float)) else None


@dataclass(slots=True)
class _Held:
    acquire: Op
    lease_ns: float | None
    possible_basis: int  # latest completion of an ok/unknown acquire or renew


def held_intervals(
    ops: Sequence[Op], max_drift: float = 0.01, end_ns: int | None = None
) -> tuple[list[Interval], list[Interval]]:
    """(surely-held, possibly-held) intervals of every grant, in acquire order; end_ns is the
    history's end (computed when not given)."""
    if end_ns is None:
        end_ns = history_end_ns(ops)
    surely: list[Interval] = []
    possibly: list[Interval] = []
    state: dict[tuple[Process, str], _Held] = {}

    def close(h: _Held, release: Op | None) -> None:
        acq = h.acquire
        lock = str(acq.get("lock"))
        token = acq.get("token")
        token = token if isinstance(token, int) else None
        p_end = float(end_ns)
        if h.lease_ns is not None:
            p_end = min(p_end, h.possible_basis + h.lease_ns * (1 + max_drift))
        if release is not None and release.ok and release.end_time is not None:
            p_end = min(p_end, release.end_time)
        possibly.append(Interval(acq.process, lock, token, acq.time / NS, p_end / NS, acq.index))

    for op in ops:
        if op.process == NEMESIS or op.f not in ("acquire", "renew", "release"):
            continue
        key = (op.process, str(op.get("lock")))
        h = state.get(key)
        if op.f == "acquire":
            if h is not None:
                close(state.pop(key), None)
            if op.type != "fail":
                done = op.end_time if op.end_time is not None else end_ns
                state[key] = _Held(op, _lease_ns(op), done)
        elif h is None:
            continue
        elif op.f == "renew":
            if op.ok and _lease_ns(op) is not None:
                h.lease_ns = _lease_ns(op)
            if op.type != "fail":
                done = op.end_time if op.end_time is not None else end_ns
                h.possible_basis = max(h.possible_basis, done)
        else:  # release
            close(state.pop(key), op)
    for h in state.values():
        close(h, None)
    # Surely-held intervals are the checker's own, so the picture matches the verdict.
    for g in build_grants(ops, max_drift=max_drift).grants:
        s_end = min(g.end, float(end_ns))
        if s_end > g.start:
            surely.append(
                Interval(g.process, str(g.lock), g.token, g.start / NS, s_end / NS, g.acquire.index)
            )
    return surely, possibly


def fault_windows(ops: Sequence[Op], end_ns: int | None = None) -> list[Window]:
    """Nemesis fault windows; a start that surely failed opens none."""
    end_s = (history_end_ns(ops) if end_ns is None else end_ns) / NS
    open_: dict[str, list[Op]] = defaultdict(list)
    out: list[Window] = []
    for op in ops:
        if op.process != NEMESIS or op.type == "fail":
            continue
        if op.f.startswith("start-"):
            open_[op.f[6:]].append(op)
        elif op.f.startswith("stop-") and open_[op.f[5:]]:
            start = open_[op.f[5:]].pop(0)
            s = (start.end_time if start.end_time is not None else start.time) / NS
            e = (op.end_time if op.end_time is not None else op.time) / NS
            out.append(Window(op.f[5:], s, max(s, e), start.index, True, start.value))
    for fault, starts in open_.items():
        for start in starts:
            s = (start.end_time if start.end_time is not None else start.time) / NS
            out.append(Window(fault, s, max(s, end_s), start.index, False, start.value))
    out.sort(key=lambda w: (w.start_s, w.index))
    return out


def merged_spans(windows: Sequence[Window]) -> tuple[list[float], list[float]]:
    """The union of the windows as sorted disjoint spans: (starts, ends)."""
    starts: list[float] = []
    ends: list[float] = []
    for w in sorted(windows, key=lambda w: w.start_s):
        if ends and w.start_s <= ends[-1]:
            ends[-1] = max(ends[-1], w.end_s)
        else:
            starts.append(w.start_s)
            ends.append(w.end_s)
    return starts, ends


def in_windows(t_s: float, spans: tuple[list[float], list[float]]) -> bool:
    """Whether t_s falls inside one of merged_spans' spans (bisect: runs have many faults)."""
    starts, ends = spans
    i = bisect.bisect_right(starts, t_s) - 1
    return i >= 0 and t_s <= ends[i]


def _process_key(p: Process) -> tuple[int, int, str]:
    return (0, p, "") if isinstance(p, int) else (1, 0, str(p))


def assign_lanes(ops: Sequence[Op], max_lanes: int = MAX_LANES,
                 name: Callable[[Process], str] = lambda p: f"p{p}") -> Lanes:
    """One lane per client process; past max_lanes processes, processes whose lifetimes do not
    overlap (a worker going on under a new id after an `info`) share a lane. name(process) is
    the lane's label (`reports.names.ProcessNames.label`: `p4 (node c5)`)."""
    first: dict[Process, int] = {}
    last: dict[Process, int] = {}
    for op in ops:
        if op.process == NEMESIS:
            continue
        first.setdefault(op.process, op.time)
        last[op.process] = max(last.get(op.process, 0), op.end_time or op.time)
    procs = sorted(first, key=_process_key)
    if len(procs) <= max_lanes:
        return Lanes({p: i for i, p in enumerate(procs)}, tuple(name(p) for p in procs))
    of: dict[Process, int] = {}
    free: list[tuple[int, int]] = []  # (busy until, lane)
    members: list[list[Process]] = []
    for p in sorted(procs, key=lambda p: (first[p], _process_key(p))):
        if free and free[0][0] < first[p]:
            _, lane = heapq.heappop(free)
        else:
            lane = len(members)
            members.append([])
        of[p] = lane
        members[lane].append(p)
        heapq.heappush(free, (last[p], lane))
    labels = []
    for lane, ps in enumerate(members):
        names = ",".join(f"p{p}" for p in ps[:3]) + ("…" if len(ps) > 3 else "")
        labels.append(f"lane {lane} ({names})")
    return Lanes(of, tuple(labels))


def availability(ops: Sequence[Op], windows: Sequence[Window]) -> list[dict[str, Any]]:
    """ok/fail/info counts per client f, for ops invoked inside and outside fault windows."""
    counts: dict[tuple[str, bool, str], int] = defaultdict(int)
    spans = merged_spans(windows)
    for op in ops:
        if op.process == NEMESIS:
            continue
        counts[(op.f, in_windows(op.time / NS, spans), op.type)] += 1
    fs = [f for f in CLIENT_FS if any(k[0] == f for k in counts)]
    fs += sorted({k[0] for k in counts} - set(CLIENT_FS))
    rows = []
    for f in fs:
        row: dict[str, Any] = {"f": f}
        for where, inside in (("in", True), ("out", False)):
            n = {t: counts[(f, inside, t)] for t in ("ok", "fail", "info")}
            total = sum(n.values())
            row[where] = {**n, "total": total, "ok_frac": n["ok"] / total if total else None}
        rows.append(row)
    return rows


def latencies_ms(ops: Sequence[Op]) -> dict[str, list[tuple[float, float]]]:
    """(invoke s, latency ms) of every completed client op, per f."""
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for op in ops:
        if op.process == NEMESIS or op.end_time is None:
            continue
        out[op.f].append((op.time / NS, (op.end_time - op.time) / 1e6))
    return dict(out)


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile of already sorted values."""
    if not sorted_values:
        return None
    rank = max(0, min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[rank]
