"""Incidents: the violations that follow from one grant going stale, told as one story.

Each violation the lock checks report names the grant it follows from (`Violation.stale_grant`):
the earlier grant of a double-grant or a token regression, the grant whose write was accepted
stale, the older of the two grants whose writes interleaved. Violations with the same
stale grant form one incident, numbered 1, 2, ... in order of that grant's ok time. An incident
also names the fault window that overlapped the grant (from the nemesis' `start-X`/`stop-X`
ops), the grant that came next, the first lost-lock notice its process was told (checker.notices),
and a plain paragraph. Violations that no single grant explains
(`lost-update`, `not-linearizable`) belong to no incident.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fencecheck.checker.base import NEMESIS, CheckResult, Op
from fencecheck.checker.grants import Grant, GrantTable, seconds, tok, who
from fencecheck.checker.notices import Heard
from fencecheck.checker.notices import heard as notices_heard


@dataclass(frozen=True, slots=True)
class FaultWindow:
    """From a nemesis `start-X` completion to the matching `stop-X` completion (None: never)."""

    f: str
    start_ns: int
    end_ns: int | None
    value: Any


def fault_windows(ops: Sequence[Op]) -> list[FaultWindow]:
    """The nemesis' fault windows; a start that surely failed opens none."""
    open_: dict[str, list[Op]] = {}
    out: list[FaultWindow] = []
    for op in ops:
        if op.process != NEMESIS or op.type == "fail":
            continue
        if op.f.startswith("start-"):
            open_.setdefault(op.f[6:], []).append(op)
        elif op.f.startswith("stop-") and open_.get(op.f[5:]):
            start = open_[op.f[5:]].pop(0)
            s = start.end_time if start.end_time is not None else start.time
            e = op.end_time if op.end_time is not None else op.time
            out.append(FaultWindow(op.f[5:], s, max(s, e), start.value))
    for f, starts in open_.items():
        for start in starts:
            s = start.end_time if start.end_time is not None else start.time
            out.append(FaultWindow(f, s, None, start.value))
    out.sort(key=lambda w: w.start_ns)
    return out


def _stretch_end(g: Grant, before: int | None) -> int | None:
    """The end of g's surely-held stretch that began last before `before` (None: endless)."""
    chosen = g.held()[0]
    for s in g.held():
        if before is None or s[0] < before:
            chosen = s
    end = chosen[1]
    return None if end == math.inf else int(end)


def _fault(windows: Sequence[FaultWindow], lo: int, hi: int | None) -> FaultWindow | None:
    """The latest-starting fault window that overlaps [lo, hi]."""
    best: FaultWindow | None = None
    for w in windows:
        if (hi is None or w.start_ns <= hi) and (w.end_ns is None or w.end_ns >= lo):
            best = w
    return best


def _next_grant(table: GrantTable, stale: Grant, named: int | None) -> Grant | None:
    if named is not None:
        return table.grants[named]
    later = [g for g in table.grants
             if g.lock == stale.lock and g.process != stale.process and g.start > stale.start]
    return min(later, key=lambda g: (g.start, g.id)) if later else None


def _story(stale: Grant, end: int | None, fault: FaultWindow | None, nxt: Grant | None,
           counts: dict[str, int], told: Heard | None = None, said: Sequence[str] = ()) -> str:
    parts = [f'{who(stale.process).capitalize()} was granted lock "{stale.lock}" '
             f"({tok(stale.token)}) at {seconds(stale.start)}"]
    parts.append("; nothing in the history ends its lease." if end is None
                 else f"; it was surely held until {seconds(end)}.")
    if told is not None:
        lead = told.lead_ns
        when = ("" if lead is None else f", {abs(lead) / 1e6:.0f} ms "
                f"{'before' if lead >= 0 else 'after'} its lease's surely-held end")
        reason = told.notice.get("reason") or "a notice"
        parts.append(f" Its lock library told it at {seconds(told.notice.time)} ({reason}){when}.")
    if fault is not None:
        detail = _fault_detail(fault.value)
        until = ("and was never healed" if fault.end_ns is None
                 else f"to {seconds(fault.end_ns)}")
        parts.append(f" A {fault.f} fault{detail} from {seconds(fault.start_ns)} {until} "
                     "overlapped it.")
    if nxt is not None:
        parts.append(f" {who(nxt.process).capitalize()} was granted the lock next, at "
                     f"{seconds(nxt.start)} ({tok(nxt.token)}).")
    followed = ", ".join(f"{n} {kind}" for kind, n in counts.items())
    parts.append(f" What followed: {followed}.")
    for step in dict.fromkeys(said):  # the library steps the evidence names (checker/steps/)
        parts.append(f" {step[:1].upper()}{step[1:]}.")
    return "".join(parts)


def _fault_detail(value: Any) -> str:
    """Whom a fault hit, in words where the nemesis named them ("of c2", "on n1, n3")."""
    if value in (None, {}):
        return ""
    if isinstance(value, dict):
        for key, word in (("targets", "of"), ("nodes", "on"), ("holder", "of")):
            names = value.get(key)
            if isinstance(names, str):
                names = [names]
            if isinstance(names, list) and names and all(isinstance(n, str) for n in names):
                return f" {word} {', '.join(names)}"
    return f" ({json.dumps(value, default=str)})"


def _op_json(g: Grant) -> dict[str, Any]:
    return {"process": g.process, "index": g.acquire.index, "token": g.token,
            "ok_time_ns": g.start}


def build_incidents(checks: dict[str, CheckResult], table: GrantTable,
                    ops: Sequence[Op]) -> list[dict[str, Any]]:
    """Group the reported violations of `checks` into incidents; set each grouped violation's
    `incident` (in place, in its check's list) and return the incidents as results.json has
    them."""
    groups: dict[int, list[tuple[str, int]]] = {}
    for name, check in checks.items():
        for n, v in enumerate(check.violations):
            if v.stale_grant is not None and 0 <= v.stale_grant < len(table.grants):
                groups.setdefault(v.stale_grant, []).append((name, n))
    order = sorted(groups, key=lambda gid: (table.grants[gid].start, gid))
    nemesis = table.nemesis_ops if table.nemesis_ops is not None else ops
    windows = fault_windows(nemesis) if order else []
    told = notices_heard(ops, table) if order else {}  # the lock libraries' lost-lock notices
    incidents: list[dict[str, Any]] = []
    for number, gid in enumerate(order, 1):
        stale = table.grants[gid]
        members = groups[gid]
        named = next((checks[c].violations[n].next_grant for c, n in members
                      if checks[c].violations[n].next_grant is not None), None)
        nxt = _next_grant(table, stale, named)
        end = _stretch_end(stale, nxt.start if nxt is not None else None)
        fault = _fault(windows, stale.start, nxt.start if nxt is not None else end)
        counts: dict[str, int] = {}
        said: list[str] = []
        for c, n in members:
            v = checks[c].violations[n]
            counts[v.kind] = counts.get(v.kind, 0) + 1
            cause = v.extra.get("cause")
            if isinstance(cause, dict) and isinstance(cause.get("said"), str):
                said.append(cause["said"])
            checks[c].violations[n] = dataclasses.replace(v, incident=number)
        heard = told.get(gid)
        incidents.append({
            "id": number,
            "lock": stale.lock,
            "stale_grant": {**_op_json(stale), "surely_held_end_ns": end},
            "fault": None if fault is None else {
                "f": fault.f, "start_time_ns": fault.start_ns, "end_time_ns": fault.end_ns,
                "value": fault.value},
            "next_grant": None if nxt is None else _op_json(nxt),
            "violations": [{"check": c, "n": n} for c, n in members],
            "kinds": sorted(counts),
            "story": _story(stale, end, fault, nxt, counts, heard, said),
            **({} if heard is None else {"notice": heard.to_json()}),
        })
    return incidents
