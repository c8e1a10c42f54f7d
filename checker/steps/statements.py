"""SQL statements as evidence (`statements`, recorded by the ShedLock JDBC client,
workloads/clients/java/shedlock-jdbc): each statement the library ran for an operation, its SQL as
sent to the database, the rows it changed and when. A release's statements are its unlock.

The step it can name: an **unlock that matched a lock another process held**. A release whose
unlock changed a row, sent after another process's grant of the same lock and before the next
grant, by a process whose own grant came earlier, freed that other process's lock; where the
statement's WHERE names no owner column the page can say the row was matched by the lock's name
alone. Only the statement, its count and its time are claimed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fencecheck.checker.base import Op, Process
from fencecheck.checker.grants import Grant, seconds, tok, who
from fencecheck.checker.steps import EVIDENCE, Cause, StepSpec

STEP = "unlock-matched-another-holder"


@dataclass(frozen=True, slots=True)
class Statement:
    sql: str
    rows: int
    time: int
    op: Op  # the op whose value recorded it


def statements(ops: Sequence[Op], f: str) -> list[Statement]:
    """The well-formed statements recorded by ops of kind `f` (others are skipped)."""
    out: list[Statement] = []
    for op in ops:
        ev = op.get(EVIDENCE) if op.f == f else None
        entries = ev.get("statements") if isinstance(ev, dict) else None
        if not isinstance(entries, list):
            continue
        for e in entries:
            if (isinstance(e, dict) and isinstance(e.get("sql"), str)
                    and type(e.get("rows")) is int and type(e.get("time")) is int):
                out.append(Statement(e["sql"], e["rows"], e["time"], op))
    return out


def where_clause(sql: str) -> str:
    m = re.search(r"\bWHERE\b(.*)$", sql, re.I | re.S)
    return m.group(1).strip() if m else ""


class StatementSteps:
    """The unlock statements of one history, for the explanations."""

    def __init__(self, ops: Sequence[Op], grants: Sequence[Grant]) -> None:
        self.unlocks = statements(ops, "release")
        self.locks = {s.op.get("lock") for s in statements(ops, "release")
                      + statements(ops, "acquire")}
        self.grants = grants

    def covers(self, lock: str) -> bool:
        return lock in self.locks

    def double_grant(self, held: Grant, later: Grant) -> Cause | None:
        for s in self.unlocks:
            p = s.op.process
            if (s.op.get("lock") != held.lock or p == held.process or s.rows < 1
                    or not held.start <= s.time <= later.start):
                continue
            own = [g for g in self.grants if g.process == p and g.lock == held.lock
                   and g.start < held.start]
            if not own:
                continue  # not a stale holder's unlock: nothing to say
            return self._cause(held, later, s, max(own, key=lambda g: g.start))
        return None

    def _cause(self, held: Grant, later: Grant, s: Statement, own: Grant) -> Cause:
        p = s.op.process
        where = where_clause(s.sql)
        clause = (f"; {who(p)}'s unlock at {seconds(s.time)}, of its grant from "
                  f"{seconds(own.start)}, changed {s.rows} row"
                  f"{'s' if s.rows != 1 else ''} with `{s.sql}`, while the lock was "
                  f"{who(held.process)}'s ({tok(held.token)}), and {who(later.process)} then "
                  "took it")
        ref: dict[str, Any] = {
            "step": STEP, "said": clause.removeprefix("; "), "process": p,
            "recorded_in": s.op.index, "time_ns": s.time, "sql": s.sql, "rows": s.rows,
            "where": where, "over": {"process": held.process, "token": held.token}}
        return Cause(clause, ref)

    def stale_write(self, writer: Process, token: int | None, write_time: int,
                    lock: str) -> Cause | None:
        return None


STEPS = StepSpec("statements", StatementSteps)
