"""The `mutex` check: no two grants of one lock surely held at the same time (`double-grant`).

Per lock, the grants' surely-held stretches (see checker.grants) are swept in start order while
remembering the one that reaches furthest; a stretch that starts before that one ends overlaps
it. Stretches are half-open: a grant starting exactly when another ends is fine.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter

from fencecheck.checker.base import CheckResult, Op
from fencecheck.checker.careless import CarelessSteps
from fencecheck.checker.grants import Collector, Grant, GrantTable, build_grants, seconds, tok, who
from fencecheck.checker.registry import CheckSpec, KindSpec
from fencecheck.checker.steps import LibrarySteps, Tally

_Stretch = tuple[int, float, str, Grant]  # start, end, ended_by, grant


def _ending(s: _Stretch) -> str:
    start, end, by, g = s
    if start != g.start:
        rest = _ending((g.start, end, by, g))
        return f"again from {seconds(start)}, after a late renewal, {rest}"
    if by == "lease":
        return f"until {seconds(end)}, when its lease could first have run out"
    if by == "nothing":
        return "and nothing in the history ends it (no release, no lease)"
    if by == "release-by-token":
        return f"until {seconds(end)}, when a release with its token was invoked"
    return f"until {seconds(end)}, when {who(g.process)} invoked its next {by}"


def mutex(ops: Sequence[Op], *, max_drift: float = 0.01,
          grants: GrantTable | None = None) -> CheckResult:
    """Find `double-grant`s. Pass `grants` to reuse a table built with the same max_drift."""
    table = grants if grants is not None else build_grants(ops, max_drift=max_drift)
    by_lock: dict[str, list[_Stretch]] = {}
    for g in table.grants:
        if g.start < g.end:
            by_lock.setdefault(g.lock, []).append((g.start, g.end, g.ended_by, g))
        for start, end, by in g.segments:  # after late renewals (rare)
            if start < end:
                by_lock.setdefault(g.lock, []).append((start, end, by, g))
    found = Collector()
    careless = CarelessSteps(table.steps)  # explanation hooks only (checker/careless.py,
    steps, causes = LibrarySteps(table.steps, table.grants), Tally()  # checker/steps/)
    for lock, stretches in by_lock.items():
        stretches.sort(key=itemgetter(0))
        reach: _Stretch | None = None
        for s in stretches:
            start, end, _, g = s
            if reach is not None and start < reach[1] and reach[3] is not g:
                r = reach[3]
                again = ("" if start == g.start
                         else f" (held again after a late renewal at {seconds(start)})")
                cause = steps.double_grant(r, g)
                causes.count(steps, lock, cause)
                found.add(
                    start, "double-grant",
                    f'{who(g.process)} was granted lock "{lock}" ({tok(g.token)}) at '
                    f"{seconds(g.start)}{again} while {who(r.process)}'s grant ({tok(r.token)}) "
                    f"from {seconds(r.start)} was surely held {_ending(reach)}"
                    + (careless.double_grant(r, g) if cause is None else cause.clause),
                    (r.ref, g.ref), lock=lock, stale_grant=r.id, next_grant=g.id,
                    cause=None if cause is None else cause.ref,
                )
            if reach is None or end > reach[1]:
                reach = s
    details = found.details()
    details.update(causes.details())
    details["grants"] = len(table.grants)
    details["max_drift"] = table.max_drift
    if table.acquires_without_lock:
        details["acquires_without_lock"] = table.acquires_without_lock
    if not table.grants:
        return CheckResult("mutex", True, skipped="no acquire completed ok", details=details)
    return CheckResult("mutex", found.count == 0, found.reported(), details=details)


CHECK = CheckSpec(
    name="mutex",
    kinds=(
        KindSpec("double-grant",
                 "the surely-held intervals of two grants of one lock overlap",
                 "grant"),
    ),
    run=lambda ops, table: mutex(ops, grants=table),
    order=10,
)
