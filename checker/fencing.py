"""The `fencing` check: tokens grow with every grant, and the resource never goes back.

- `token-regression`: grants g1, g2 of one lock with g1.ok < g2.invoke and g2.token <= g1.token.
- `stale-write-accepted`: accepted writes w1, w2 on one key with w1.ok < w2.invoke and
  w2.token < w1.token.

Both are one sweep per lock or key: the later operations in invoke order against the highest
token among those that surely completed before each one began. Null tokens cannot be judged and
are left out (counted in the details); with none at all the check says it skipped. A lock or
key whose tokens already rise in the order that settles it (ok order for grants, invoke order for
writes) cannot hold a violation, which C-level passes show without the sweep (the usual case of a
fenced run, and most of the time of a million-event check).
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

from fencecheck.checker.base import CheckResult, Op, op_ref
from fencecheck.checker.careless import CarelessSteps
from fencecheck.checker.grants import (
    Collector,
    Grant,
    GrantTable,
    build_grants,
    seconds,
    who,
    write_columns,
)
from fencecheck.checker.registry import CheckSpec, KindSpec

_START = attrgetter("start")


def _regressions(table: GrantTable, found: Collector) -> tuple[int, int]:
    by_lock: dict[str, list[Grant]] = {}
    untokened = 0
    for g in table.grants:
        if g.token is None:
            untokened += 1
        else:
            by_lock.setdefault(g.lock, []).append(g)
    for lock, gs in by_lock.items():
        by_ok = sorted(gs, key=_START)
        tokens = [g.token or 0 for g in by_ok]  # only grants with a token are here
        if not table.granted_before_invoke and tokens == sorted(set(tokens)):  # rising
            # g1.ok < g2.invoke <= g2.ok puts g1 first in ok order, with a lower token
            continue
        j = 0
        top: Grant | None = None
        top_token = 0
        for g2 in gs:  # already in invoke order
            while j < len(by_ok) and by_ok[j].start < g2.acquire.time:
                cand = by_ok[j]
                if cand.token is not None and (top is None or cand.token > top_token):
                    top, top_token = cand, cand.token
                j += 1
            if top is not None and g2.token is not None and g2.token <= top_token:
                found.add(
                    g2.start, "token-regression",
                    f'{who(g2.process)} was granted lock "{lock}" at {seconds(g2.start)} with '
                    f"token {g2.token}, not above token {top.token} granted to "
                    f"{who(top.process)} at {seconds(top.start)}, before this acquire began",
                    (top.ref, g2.ref), lock=lock, stale_grant=top.id, next_grant=g2.id,
                )
    return sum(len(v) for v in by_lock.values()), untokened


def _stale_writes(table: GrantTable, found: Collector,
                  careless: CarelessSteps) -> tuple[int, int]:
    judged = untokened = 0
    for key, accepted in table.writes.items():
        cols = write_columns(table, key)
        tokens = cols.tokens
        if list(map(type, tokens)).count(int) == len(tokens):  # all ints (4x all(map(is_...)))
            judged += len(accepted)
            if cols.ordered and tokens == sorted(tokens):  # never falling (ints: see tally)
                # w1.ok < w2.invoke puts w1 before w2 in the list, where its token is no higher
                continue
            ws, token = accepted, tokens
        else:
            ws, token = [], []
            for w, t in zip(accepted, tokens, strict=True):
                if type(t) is int:
                    ws.append(w)
                    token.append(t)
            untokened += len(accepted) - len(ws)
            judged += len(ws)
            if not ws:
                continue
        _sweep_writes(key, ws, token, table, found, careless)
    return judged, untokened


def _sweep_writes(key: str, ws: list[Op], token: list[int], table: GrantTable,
                  found: Collector, careless: CarelessSteps) -> None:
    """Every write against the highest token among the writes completed before it began."""
    inv = [w.time for w in ws]  # in invoke order
    ok: list[int] = [w.end_time for w in ws]  # type: ignore[misc]  # accepted: completed
    by_ok = sorted(range(len(ws)), key=ok.__getitem__)
    j = 0
    top = -1  # position of the highest token among writes completed so far
    n = len(ws)
    for i in range(n):
        t_inv = inv[i]
        while j < n and ok[by_ok[j]] < t_inv:
            c = by_ok[j]
            if top < 0 or token[c] > token[top]:
                top = c
            j += 1
        if top >= 0 and token[i] < token[top]:
            w1, w2 = ws[top], ws[i]
            found.add(
                ok[i], "stale-write-accepted",
                f"{who(w2.process)}'s write with token {token[i]} was accepted at "
                f"{seconds(ok[i])} although the resource had already accepted token "
                f"{token[top]} at {seconds(ok[top])} (from {who(w1.process)})"
                + careless.stale_write(w2.process, token[i], w2.time, w2.get("lock")),
                (op_ref(w1), op_ref(w2)), key=key,
                stale_grant=table.write_grant.get(w2.index),
                next_grant=table.write_grant.get(w1.index),
            )


def fencing(ops: Sequence[Op], *, max_drift: float = 0.01,
            grants: GrantTable | None = None) -> CheckResult:
    """Find `token-regression`s and `stale-write-accepted`s."""
    table = grants if grants is not None else build_grants(ops, max_drift=max_drift)
    found = Collector()
    judged_grants, untokened_grants = _regressions(table, found)
    judged_writes, untokened_writes = _stale_writes(table, found, CarelessSteps(table.steps))
    details = found.details()
    details.update(
        grants_with_token=judged_grants, grants_without_token=untokened_grants,
        writes_with_token=judged_writes, writes_without_token=untokened_writes,
    )
    if judged_grants == 0 and judged_writes == 0:
        return CheckResult(
            "fencing", True,
            skipped="no fencing tokens in the history (the lock service gives none)",
            details=details,
        )
    return CheckResult("fencing", found.count == 0, found.reported(), details=details)


CHECK = CheckSpec(
    name="fencing",
    kinds=(
        KindSpec("token-regression",
                 "a grant of a lock after another's ok carries a token not above the earlier one's",
                 "grant"),
        KindSpec("stale-write-accepted",
                 "on one key, an accepted write after another accepted write's ok "
                 "carries a lower token",
                 "write"),
    ),
    run=lambda ops, table: fencing(ops, grants=table),
    order=20,
)
