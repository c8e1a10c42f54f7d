"""The `exclusion` check: critical sections on one key never interleave (`interleaved-writes`).

A violation is three accepted writes on one key, a1, b, a2, with a1.ok < b.invoke and
b.ok < a2.invoke, where a1 and a2 belong to one grant and b to another (a write belongs to the
grant its process most recently acquired on the write's lock; see checker.grants).

Per grant G it is enough to take a1 = G's earliest-completing write and a2 = G's latest-invoked
one, and ask whether some other grant's write lies strictly between (a1.ok, a2.invoke). That
question is answered for all grants at once from suffix minima, over the key's writes in invoke
order, of the completion time (the best two from distinct grants, so G's own can be skipped).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from checker.base import CheckResult, Op, op_ref
from checker.grants import Collector, GrantTable, build_grants, seconds, tok, who


@dataclass(slots=True)
class _W:
    inv: int
    ok: int
    grant: int  # grant id; writes of no known grant get a distinct negative id each
    op: Op


def _check_key(key: str, ws: list[_W], found: Collector) -> None:
    n = len(ws)  # in invoke order
    # suffix bests: the write with the smallest ok among ws[i:], and the best of another grant
    INF = (1 << 63, -1)
    best1: list[tuple[int, int]] = [INF] * (n + 1)  # (ok, position)
    best2: list[tuple[int, int]] = [INF] * (n + 1)
    for i in range(n - 1, -1, -1):
        b1, b2 = best1[i + 1], best2[i + 1]
        cand = (ws[i].ok, i)
        if cand < b1:
            if b1[1] >= 0 and ws[b1[1]].grant != ws[i].grant:
                b2 = b1
            b1 = cand
        elif cand < b2 and ws[i].grant != ws[b1[1]].grant:
            b2 = cand
        best1[i], best2[i] = b1, b2
    invokes = [w.inv for w in ws]
    groups: dict[int, list[int]] = {}
    for i, w in enumerate(ws):
        if w.grant >= 0:
            groups.setdefault(w.grant, []).append(i)
    for gid, members in groups.items():
        if len(members) < 2:
            continue
        a1 = min(members, key=lambda i: ws[i].ok)
        hi = ws[members[-1]].inv
        lo = ws[a1].ok
        pos = bisect_right(invokes, lo)
        ok, b = best1[pos]
        if b >= 0 and ws[b].grant == gid:
            ok, b = best2[pos]
        if b < 0 or ok >= hi:
            continue
        a2 = next(i for i in members if ws[i].inv > ok)
        wa1, wb, wa2 = ws[a1], ws[b], ws[a2]
        tk = wa1.op.get("token")
        found.add(
            wa2.inv, "interleaved-writes",
            f'{who(wa1.op.process)}\'s writes to key "{key}" under one grant of lock '
            f'"{wa1.op.get("lock")}" ({tok(tk if type(tk) is int else None)}) completed at '
            f"{seconds(wa1.ok)} and began again at {seconds(wa2.inv)}, and in between "
            f"{who(wb.op.process)}'s write under another grant was accepted "
            f"({seconds(wb.inv)} to {seconds(wb.ok)})",
            (op_ref(wa1.op), op_ref(wb.op), op_ref(wa2.op)), key=key,
        )


def exclusion(ops: Sequence[Op], *, max_drift: float = 0.01,
              grants: GrantTable | None = None) -> CheckResult:
    """Find `interleaved-writes`."""
    table = grants if grants is not None else build_grants(ops, max_drift=max_drift)
    owner = table.write_grant
    by_key: dict[str, list[_W]] = {}
    orphans = 0
    for key, accepted in table.writes.items():
        ws = by_key[key] = []
        for op in accepted:
            gid = owner.get(op.index)
            if gid is None:
                orphans += 1
                gid = -1 - op.index
            assert op.end_time is not None  # accepted: completed
            ws.append(_W(op.time, op.end_time, gid, op))
    found = Collector()
    for key, ws in by_key.items():
        _check_key(key, ws, found)
    details = found.details()
    details["accepted_writes"] = sum(len(v) for v in by_key.values())
    details["writes_without_grant"] = orphans
    if not by_key:
        return CheckResult("exclusion", True, skipped="no accepted writes", details=details)
    return CheckResult("exclusion", found.count == 0, found.reported(), details=details)
