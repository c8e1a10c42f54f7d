"""The `exclusion` check: critical sections on one key never interleave (`interleaved-writes`).

A violation is three accepted writes on one key, a1, b, a2, with a1.ok < b.invoke and
b.ok < a2.invoke, where a1 and a2 belong to one grant and b to another (a write belongs to the
grant its process most recently acquired on the write's lock; see checker.grants).

Per grant G it is enough to take a1 = G's earliest-completing write and a2 = G's latest-invoked
one, and ask whether some other grant's write lies strictly between (a1.ok, a2.invoke). That
question is answered for all grants at once from suffix minima, over the key's writes in invoke
order, of the completion time (the best two from distinct grants, so G's own can be skipped).
A key whose writes are in invoke-time order with each grant's writes in one run cannot hold a
violation (`runs_apart`), which C-level passes show without the sweep.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import islice
from operator import ne
from typing import Any

from fencecheck.checker.base import CheckResult, Op, op_ref
from fencecheck.checker.grants import (
    Collector,
    GrantTable,
    build_grants,
    seconds,
    tok,
    who,
    write_columns,
)
from fencecheck.checker.registry import CheckSpec, KindSpec
from fencecheck.checker.steps import Cause, LibrarySteps


def _check_key(key: str, ws: list[Op], inv: list[int], ok: list[int], grant: list[int],
               found: Collector, starts: Sequence[int],
               explain: Callable[[int, int], Cause | None] = lambda g, at: None) -> None:
    """`ws` are the key's accepted writes in invoke order; inv/ok/grant are their invoke and
    completion times and grant ids (writes of no known grant have distinct negative ids);
    `starts` are the grants' ok times by id; `explain(grant, at)` the library step, if its
    evidence shows one, that left that grant's holder writing at `at` (checker/steps/)."""
    n = len(ws)
    # suffix bests over ws[i:]: the smallest ok (b1), and the smallest of another grant (b2)
    big = 1 << 63
    b1_ok, b1_at = [big] * (n + 1), [-1] * (n + 1)
    b2_ok, b2_at = [big] * (n + 1), [-1] * (n + 1)
    c1o, c1a, c2o, c2a = big, -1, big, -1
    for i in range(n - 1, -1, -1):
        o = ok[i]
        if o < c1o:
            if c1a >= 0 and grant[c1a] != grant[i]:
                c2o, c2a = c1o, c1a
            c1o, c1a = o, i
        elif o < c2o and grant[i] != grant[c1a]:
            c2o, c2a = o, i
        b1_ok[i], b1_at[i], b2_ok[i], b2_at[i] = c1o, c1a, c2o, c2a
    # per grant: its earliest-completing write (a1 candidate) and its last-invoked one
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i in range(n):
        g = grant[i]
        if g >= 0:
            f = first.get(g)
            if f is None or ok[i] < ok[f]:
                first[g] = i
            last[g] = i
    for g, a1 in first.items():
        hi = inv[last[g]]
        pos = bisect_right(inv, ok[a1])
        b_ok, b = b1_ok[pos], b1_at[pos]
        if b >= 0 and grant[b] == g:
            b_ok, b = b2_ok[pos], b2_at[pos]
        if b < 0 or b_ok >= hi:
            continue
        a2 = next(i for i in range(bisect_right(inv, b_ok), n) if grant[i] == g)
        wa1, wb, wa2 = ws[a1], ws[b], ws[a2]
        tk = wa1.get("token")
        stale, nxt = _episode(g, grant[b], starts)
        cause = explain(stale, inv[a2] if stale == g else inv[b]) if stale >= 0 else None
        found.add(
            inv[a2], "interleaved-writes",
            f'{who(wa1.process)}\'s writes to key "{key}" under one grant of lock '
            f'"{wa1.get("lock")}" ({tok(tk if type(tk) is int else None)}) completed at '
            f"{seconds(ok[a1])} and began again at {seconds(inv[a2])}, and in between "
            f"{who(wb.process)}'s write under another grant was accepted "
            f"({seconds(inv[b])} to {seconds(b_ok)})" + (cause.clause if cause else ""),
            (op_ref(wa1), op_ref(wb), op_ref(wa2)), key=key,
            stale_grant=stale, next_grant=nxt, cause=cause.ref if cause else None,
        )


def runs_apart(grant: list[int]) -> bool:
    """True if each grant's writes form one unbroken run of the list. With the list `ordered`
    (checker.tally.WriteColumns) nothing interleaves then: a1.ok < b.invoke and b.ok < a2.invoke
    put b strictly between a1 and a2 in the list, where a run of a1's grant leaves no room."""
    return int(sum(map(ne, grant, islice(grant, 1, None)))) + 1 == len(set(grant))


def _episode(a: int, b: int, starts: Sequence[int]) -> tuple[int, int | None]:
    """Which of the two grants went stale: the one granted first. Whether its writes were split
    by the newer holder's, or its own late write split the newer holder's, the story is the
    same: the older grant outlived its lease."""
    if b < 0:
        return a, None
    old, new = sorted((a, b), key=lambda g: (starts[g], g))
    return old, new


def exclusion(ops: Sequence[Op], *, max_drift: float = 0.01,
              grants: GrantTable | None = None) -> CheckResult:
    """Find `interleaved-writes`."""
    table = grants if grants is not None else build_grants(ops, max_drift=max_drift)
    owner = table.write_grant
    found = Collector()
    orphans = accepted = 0
    starts = [g.start for g in table.grants]
    steps, gs = LibrarySteps(table.steps, table.grants), table.grants

    def explain(gid: int, at: int) -> Cause | None:
        return steps.stale_write(gs[gid].process, gs[gid].token, at, gs[gid].lock)

    for key, ws in table.writes.items():
        accepted += len(ws)
        cols = write_columns(table, key)
        gids: list[Any] = cols.gids
        if None not in gids:
            if cols.ordered and runs_apart(gids):
                continue
            grant: list[int] = gids  # no None in it
        else:
            # writes of no known grant get distinct negative ids
            grant = [owner.get(w.index, -1 - w.index) for w in ws]
            orphans += sum(1 for g in grant if g < 0)
        _check_key(key, ws, cols.inv, cols.ok, grant, found, starts, explain)
    details = found.details()
    details["accepted_writes"] = accepted
    details["writes_without_grant"] = orphans
    if not accepted:
        return CheckResult("exclusion", True, skipped="no accepted writes", details=details)
    return CheckResult("exclusion", found.count == 0, found.reported(), details=details)


CHECK = CheckSpec(
    name="exclusion",
    kinds=(
        KindSpec("interleaved-writes",
                 "on one key, accepted writes a1, b, a2 in real-time order, a1 and a2 "
                 "of one grant, b of another",
                 "write"),
    ),
    run=lambda ops, table: exclusion(ops, grants=table),
    order=30,
)
