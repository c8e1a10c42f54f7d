"""The incident view: per incident of results.json, a sequence diagram drawn as inline SVG.

In the style of Kleppmann's fencing figure (time runs left to right): a lane for the client whose
grant went stale, one for the lock service, one for the client granted next, one for the resource.
The stale grant's lease is a bar ending at its surely-held end (a dashed line across every lane),
the fault that hit the holder is a shaded window on its lane, each grant is an arrow from the lock
service with its token, and each write is an arrow to the resource with its token; the write that
did the damage (accepted, or rejected by the fence) is red. `incident_views` turns results and
ops into plain shapes; `templates/incident.svg.j2` draws them (autoescaped: names are data).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import Any

from msgspec import UNSET, UnsetType

from fencecheck.checker.base import NEMESIS, Op
from fencecheck.checker.names import ProcessNames, fault_target, legend
from fencecheck.checker.registry import kind
from fencecheck.records.results import Fault, Grant, Incident, Notice, Results, Violation
from fencecheck.reports.incident_scale import Scale

WIDTH = 980
LEFT = 190  # room for lane names
RIGHT = 30
LANE_GAP = 72
TOP = 46
MAX_WRITES_PER_LANE = 14  # beyond this a lane's arrows would merge into a smear
NS = 1e9
LATE_WRITE_NS = 60 * 10**9  # a write invoked this long before the window may still end in it


def _ns(v: int | UnsetType | None) -> int | None:
    return None if v is UNSET else v


def incident_violations(results: Results, incident: Incident
                        ) -> list[tuple[str, int, Violation]]:
    """(check, position, violation) of an incident: by the violations' own `incident` id, else
    by the incident's `violations` references (`n` = position in that check's list)."""
    found = [(name, n, v) for name, c in results.checks.items()
             for n, v in enumerate(c.violations) if v.incident == incident.id]
    if found:
        return found
    for ref in incident.violations:
        check = results.checks.get(ref.check)
        if check is not None and ref.n < len(check.violations):
            found.append((ref.check, ref.n, check.violations[ref.n]))
    return found


def _damaging_write(v: Violation) -> int | None:
    """The index of the write that did a violation's damage: a write accepted after another
    grant's write with a higher token, for kinds whose incident role is "write"
    (checker/registry.py). stale-write-accepted: its second op; interleaved-writes (a1, b, a2):
    whichever of b and a2 carries the lower token (b when tokens are unknown). None for kinds
    that are not about writes."""
    ops = v.ops
    spec = kind(v.kind)
    if spec is None or spec.incident != "write" or len(ops) < 2:
        return None
    later = [r for r in ops[1:] if r.f in ("write", UNSET)]
    if later and all(r.token is not None for r in later):
        return min(later, key=lambda r: r.token or 0).index
    return later[0].index if later else None


def _fault_label(fault: Fault) -> str:
    f = (fault.f or "fault").removeprefix("start-")
    target = fault_target(fault.value)
    return f"{f} of {target}" if target else f


def _grant_end(ops_by_process: Mapping[Any, Sequence[Op]], grant: Op, limit: int) -> int:
    """Where a grant's bar ends in the drawing: its process's next release or acquire on the
    lock, else the right edge."""
    lock = grant.get("lock")
    ops = ops_by_process.get(grant.process, ())
    # A process's ops are in time order: times never go backwards within one process.
    for op in ops[bisect.bisect_right(ops, grant.time, key=lambda op: op.time):]:
        if op.time > limit:
            break
        if op.f in ("release", "acquire") and op.get("lock") == lock:
            return min(op.time, limit)
    return limit


def _writes(ops: Sequence[Op], process: Any, lock: str, t0: int, t1: int,
            damaging: set[int], token: Any) -> list[Op]:
    """process's writes under the lock in [t0, t1]; with tokens, only those under the grant's
    own token (writes under the process's other grants are another story)."""
    lo = bisect.bisect_left(ops, t0 - LATE_WRITE_NS, key=lambda op: op.time)
    hi = bisect.bisect_right(ops, t1, key=lambda op: op.time)
    ws = [op for op in ops[lo:hi]
          if op.process == process and op.f == "write"
          and (op.get("lock") == lock or op.get("key") == lock)
          and (token is None or op.get("token") == token or op.index in damaging)
          and op.time <= t1 and (op.end_time or op.time) >= t0]
    if len(ws) <= MAX_WRITES_PER_LANE:
        return ws
    keep = {op.index for op in ws if op.index in damaging}
    rest = [op for op in ws if op.index not in keep]
    step = max(1, len(rest) // max(1, MAX_WRITES_PER_LANE - len(keep)))
    keep |= {op.index for op in rest[::step]}
    return [op for op in ws if op.index in keep]


def incident_view(incident: Incident, results: Results,
                  by_index: Mapping[int, Op], client_ops: Mapping[Any, Sequence[Op]],
                  names: ProcessNames, card_of: Mapping[tuple[str, int], int]) -> dict[str, Any]:
    """One incident as shapes for the SVG template, with its paragraph and violation links."""
    lock = incident.lock
    stale = incident.stale_grant
    nxt = incident.next_grant
    fault = incident.fault
    vs = incident_violations(results, incident)
    stale_p = stale.process
    next_p = nxt.process if nxt else None
    stale_op = by_index.get(stale.index)
    next_op = by_index.get(nxt.index) if nxt else None
    damaging = {i for _, _, v in vs if (i := _damaging_write(v)) is not None}
    ok_ns = _ns(stale.ok_time_ns) or (stale_op.end_time if stale_op else None) or 0
    end_ns = _ns(stale.surely_held_end_ns) or ok_ns
    t0, t1 = _window(fault, nxt, stale_op, ok_ns, end_ns, damaging, by_index)
    lanes, y = _lanes(names, stale_p, next_p, nxt is not None)
    y_next = y.get("next", y["stale"])
    lanes_of = ((stale_p, y["stale"], stale.token),
                (next_p, y_next, nxt.token if nxt else None))
    writes: dict[Any, list[Op]] = {}
    for p, _, token in lanes_of:  # a process is drawn once, on its first lane
        if p is not None and p not in writes:
            writes[p] = _writes(client_ops.get(p, ()), p, lock, t0, t1, damaging, token)
    bar_end = _grant_end(client_ops, next_op, t1) if next_op is not None else t1
    drawn = [stale_op.time if stale_op else ok_ns, ok_ns, end_ns, bar_end,
             *(t for w in writes.values() for op in w for t in (op.time, op.end_time or t1))]
    if fault is not None:
        drawn += [fault.start_time_ns or t0, fault.end_time_ns or t1]
    if incident.notice is not UNSET:  # the lock library's lost-lock notice, kept in view
        drawn.append(incident.notice.time_ns)
    if nxt is not None:
        drawn += [next_op.time if next_op else t1, _ns(nxt.ok_time_ns) or t1]
    sc = Scale(t0, t1, drawn, LEFT, WIDTH - RIGHT)

    shapes: dict[str, Any] = {"bars": [], "arrows": [], "faults": [], "marks": [], "labels": []}
    if fault is not None:
        fs = fault.start_time_ns or t0
        fe = fault.end_time_ns
        shapes["faults"].append({
            "x0": sc.x(fs), "x1": sc.x(fe if fe is not None else t1), "y": y["stale"],
            "label": _fault_label(fault) + ("" if fe is not None else " (not healed)"),
        })
    shapes["bars"].append({"x0": sc.x(ok_ns), "x1": sc.x(end_ns), "y": y["stale"],
                           "cls": "lease", "label": f"lease, token {stale.token}"})
    x_end = sc.x(end_ns)
    shapes["marks"].append({"x": x_end, "anchor": "end" if x_end > WIDTH - 300 else "start",
                            "label": f"lease of p{stale_p} surely over at {end_ns / NS:.3f} s"})
    _grant_arrows(shapes, sc, y["lock"], stale_op, stale, y["stale"])
    if nxt is not None:
        _grant_arrows(shapes, sc, y["lock"], next_op, nxt, y_next)
        next_ok = _ns(nxt.ok_time_ns) or t1
        shapes["bars"].append({"x0": sc.x(next_ok), "x1": sc.x(bar_end), "y": y_next,
                               "cls": "lease-next", "label": f"lease, token {nxt.token}"})
    damage = _write_arrows(shapes, sc, y["resource"], lanes_of, writes, names, t1, damaging,
                           stale_p, end_ns)
    height = TOP + (len(lanes) - 1) * LANE_GAP + 56
    return {
        "id": incident.id,
        "lock": lock,
        "kinds": list(incident.kinds),
        "story": incident.story,
        # the story says "process 4": which node that was
        "legend": legend(names, [stale_p, next_p, *(r.process for _, _, v in vs for r in v.ops)]),
        "stale": names.label(stale_p),
        "stale_token": stale.token,
        "next": names.label(next_p) if nxt is not None else None,
        "next_token": nxt.token if nxt else None,
        "fault": _fault_label(fault) if fault else None,
        "damage": damage,
        "notice": _notice_mark(incident.notice, sc, y["stale"]),
        "links": [{"check": c, "n": card_of.get((c, n)), "kind": v.kind} for c, n, v in vs],
        "width": WIDTH, "height": height, "left": LEFT, "right": WIDTH - RIGHT,
        "lanes": lanes, "axis_y": height - 24,
        "ticks": [{"x": x, "label": label, "anchor": anchor} for x, label, anchor in sc.ticks()],
        "breaks": [{"x0": b.x0, "x1": b.x1, "label": f"{b.seconds:.2f} s"} for b in sc.breaks],
        **shapes,
    }


def _notice_mark(notice: Notice | UnsetType, sc: Scale, y: int) -> dict[str, Any] | None:
    """The stale holder's lost-lock notice (checker.notices) as a mark on its lane, or None."""
    if notice is UNSET:
        return None
    lead = notice.lead_ns
    when = ("" if lead is None else
            f" ({abs(lead) / 1e6:.0f} ms {'before' if lead >= 0 else 'after'} the lease's end)")
    return {"x": sc.x(notice.time_ns), "y": y,
            "label": f"{notice.reason or 'notice'} at {notice.time_ns / NS:.3f} s{when}"}


def _window(fault: Fault | None, nxt: Grant | None, stale_op: Op | None, ok_ns: int,
            end_ns: int, damaging: set[int], by_index: Mapping[int, Op]) -> tuple[int, int]:
    """The time window drawn: from the stale grant's invoke to the damage and the next grant,
    padded, and back to the fault's start when that is near."""
    times = [stale_op.time if stale_op else ok_ns, ok_ns, end_ns]
    times += [by_index[i].end_time or by_index[i].time for i in damaging if i in by_index]
    if nxt is not None:
        times.append(_ns(nxt.ok_time_ns) or 0)
    times = [t for t in times if t]
    span = max(times) - min(times) if times else 0
    pad = max(span // 12, 20_000_000)
    t0, t1 = min(times) - pad, max(times) + pad
    if fault is not None:
        fs = fault.start_time_ns
        if fs < t0 and t0 - fs < 3 * (t1 - t0):
            t0 = fs - pad // 2  # the pause's start belongs in the picture when near
    return t0, t1


def _lanes(names: ProcessNames, stale_p: Any, next_p: Any, has_next: bool
           ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The lanes top to bottom (stale holder, lock service, next holder when another process,
    resource), and the y of each role."""
    lanes: list[dict[str, Any]] = [{"name": names.label(stale_p), "role": "stale"}]
    lanes.append({"name": "lock service", "role": "lock"})
    if has_next and next_p != stale_p:
        lanes.append({"name": names.label(next_p), "role": "next"})
    lanes.append({"name": "resource", "role": "resource"})
    for i, lane in enumerate(lanes):
        lane["y"] = TOP + i * LANE_GAP
    return lanes, {lane["role"]: lane["y"] for lane in lanes}


def label_width(text: str) -> float:
    """About how wide `text` is drawn in the diagram's 11 px bold labels."""
    return 7.0 * len(text)


def _grant_arrows(shapes: dict[str, Any], sc: Scale, lock_y: int, op: Op | None, ref: Grant,
                  lane_y: int) -> None:
    """A grant's request to the lock service and its reply, labelled with its token."""
    ok_t = _ns(ref.ok_time_ns) or (op.end_time if op else None)
    if ok_t is None:
        return
    inv_t = op.time if op is not None else ok_t
    x_req, x = sc.x(inv_t), sc.x(ok_t)
    shapes["arrows"].append({"x0": x_req, "y0": lane_y, "x1": x_req,
                             "y1": lock_y, "cls": "req", "title": "acquire"})
    shapes["arrows"].append({"x0": x, "y0": lock_y, "x1": x, "y1": lane_y,
                             "cls": "grant", "title": f"granted at {ok_t / NS:.3f} s"})
    # Beside the grant's arrow and across neither arrow (a label over the dotted request cannot
    # be read): left of it, where the writes that follow a grant do not draw, when the request
    # is far enough left to leave room, else left of both, else right of both.
    text = f"ok, token {ref.token}"
    w = label_width(text)
    lo, hi = min(x_req, x), max(x_req, x)
    if x_req < x - w - 10:
        at, anchor = x - 5, "end"
    elif lo - 5 - w >= LEFT:
        at, anchor = lo - 5, "end"
    else:
        at, anchor = hi + 5, "start"
    shapes["labels"].append({"x": at, "y": (lock_y + lane_y) / 2 + 4, "text": text,
                             "cls": "grant", "anchor": anchor})


def _write_arrows(shapes: dict[str, Any], sc: Scale, resource_y: int,
                  lanes_of: Sequence[tuple[Any, int, Any]], writes: Mapping[Any, Sequence[Op]],
                  names: ProcessNames, t1: int, damaging: set[int], stale_p: Any, end_ns: int
                  ) -> list[str]:
    """Each client lane's writes (`writes`, by process) as arrows to the resource, the damaging
    ones red (and the first labelled); returns the damage, a line per damaging write."""
    damage: list[str] = []
    drawn: set[Any] = set()
    for p, lane_y, _token in lanes_of:
        if p is None or p in drawn:
            continue
        drawn.add(p)
        for w in writes.get(p, ()):
            bad = w.index in damaging or (
                p == stale_p and w.time >= end_ns and w.error == "stale-token")
            accepted = w.type == "ok"
            outcome = "accepted" if accepted else (
                "rejected" if w.error == "stale-token" else w.type)
            end_t = w.end_time if w.end_time is not None else t1
            label = f"write token {w.get('token')}" + (f": {outcome}" if bad else "")
            shapes["arrows"].append({
                "x0": sc.x(w.time), "y0": lane_y, "x1": sc.x(end_t), "y1": resource_y,
                "cls": ("bad" if bad else "write") + ("" if accepted else " rejected"),
                "title": f"#{w.index} {names.label(p)} {label} ({outcome}) at {w.time / NS:.3f} s",
            })
            if bad and not damage:  # one label: a run of damaging writes would overprint
                shapes["labels"].append({"x": sc.x(end_t), "y": resource_y + 16,
                                         "text": label, "cls": "bad", "anchor": "middle"})
            if bad:
                damage.append(f"#{w.index} {names.label(p)} write token {w.get('token')} "
                              f"{outcome} at {end_t / NS:.3f} s")
    return damage


def incident_views(results: Results | None, ops: Sequence[Op],
                   names: ProcessNames, card_of: Mapping[tuple[str, int], int]
                   ) -> list[dict[str, Any]]:
    """Every incident of results, drawn; none when results carry no incidents."""
    if results is None:
        return []
    by_index = {op.index: op for op in ops}
    client_ops: dict[Any, list[Op]] = {}
    for op in ops:
        if op.process != NEMESIS:
            client_ops.setdefault(op.process, []).append(op)
    return [incident_view(i, results, by_index, client_ops, names, card_of)
            for i in results.incidents]
