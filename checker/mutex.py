"""The `mutex` check: no two grants of one lock surely held at the same time (`double-grant`).

Per lock, the grants' surely-held intervals (see checker.grants) are swept in start order while
remembering the one that reaches furthest; a grant that starts before that one ends overlaps it.
Intervals are half-open: a grant starting exactly when another ends is fine.
"""

from __future__ import annotations

from collections.abc import Sequence

from checker.base import CheckResult, Op
from checker.grants import Collector, Grant, GrantTable, build_grants, seconds, tok, who


def _ending(g: Grant) -> str:
    if g.ended_by == "lease":
        return f"until {seconds(g.end)}, when its lease could first have run out"
    if g.ended_by == "nothing":
        return "and nothing in the history ends it (no release, no lease)"
    if g.ended_by == "release-by-token":
        return f"until {seconds(g.end)}, when a release with its token was invoked"
    return f"until {seconds(g.end)}, when {who(g.process)} invoked its next {g.ended_by}"


def mutex(ops: Sequence[Op], *, max_drift: float = 0.01,
          grants: GrantTable | None = None) -> CheckResult:
    """Find `double-grant`s. Pass `grants` to reuse a table built with the same max_drift."""
    table = grants if grants is not None else build_grants(ops, max_drift=max_drift)
    by_lock: dict[str, list[Grant]] = {}
    for g in table.grants:
        if g.start < g.end:
            by_lock.setdefault(g.lock, []).append(g)
    found = Collector()
    for lock, gs in by_lock.items():
        gs.sort(key=lambda g: g.start)
        reach: Grant | None = None
        for g in gs:
            if reach is not None and g.start < reach.end:
                found.add(
                    g.start, "double-grant",
                    f'{who(g.process)} was granted lock "{lock}" ({tok(g.token)}) at '
                    f"{seconds(g.start)} while {who(reach.process)}'s grant ({tok(reach.token)}) "
                    f"from {seconds(reach.start)} was surely held {_ending(reach)}",
                    (reach.ref, g.ref), lock=lock,
                )
            if reach is None or g.end > reach.end:
                reach = g
    details = found.details()
    details["grants"] = len(table.grants)
    details["max_drift"] = table.max_drift
    if not table.grants:
        return CheckResult("mutex", True, skipped="no acquire completed ok", details=details)
    return CheckResult("mutex", found.count == 0, found.reported(), details=details)
