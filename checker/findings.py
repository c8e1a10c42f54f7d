"""How the checks word and gather their findings: `Collector` keeps the first MAX_REPORTED
violations of a check (by when they became evident) and counts all of them; `seconds`, `who` and
`tok` are the words every explanation uses for a time, a process and a token. (checker.grants
re-exports them, where the checks have always imported them from.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from fencecheck.checker.base import NEMESIS, OpRef, Process, Violation

MAX_REPORTED = 100  # violations listed per check; all are counted in the check's details


def seconds(ns: int | float) -> str:
    """ns since the run started as a short seconds figure: 12300000000 -> '12.3 s'."""
    if ns == math.inf:
        return "the end of the history"
    text = f"{ns / 1e9:.3f}".rstrip("0").rstrip(".")
    return f"{text} s"


def who(p: Process) -> str:
    return "the nemesis" if p == NEMESIS else f"process {p}"


def tok(token: int | None) -> str:
    return "no token" if token is None else f"token {token}"


@dataclass(slots=True)
class Collector:
    """Keeps the first MAX_REPORTED violations (by when they became evident) and counts all."""

    found: list[tuple[int, Violation]] = field(default_factory=list)
    by_kind: dict[str, int] = field(default_factory=dict)

    def add(self, at: int, kind: str, explanation: str, ops: tuple[OpRef, ...], *,
            lock: str | None = None, key: str | None = None, stale_grant: int | None = None,
            next_grant: int | None = None, cause: dict[str, Any] | None = None) -> None:
        """Record a violation that became evident at `at` ns (kept in the output as "time_ns").
        `stale_grant` is the grant whose going stale it follows from (its incident), `next_grant`
        the grant that came after it, where known, `cause` the library step (checker.steps)."""
        v = Violation(kind, explanation, ops, lock=lock, key=key, extra={"time_ns": at, **(
            {"cause": cause} if cause else {})}, stale_grant=stale_grant, next_grant=next_grant)
        self.found.append((at, v))
        self.by_kind[kind] = self.by_kind.get(kind, 0) + 1

    @property
    def count(self) -> int:
        return len(self.found)

    def reported(self) -> list[Violation]:
        self.found.sort(key=lambda x: x[0])
        return [v for _, v in self.found[:MAX_REPORTED]]

    def details(self) -> dict[str, Any]:
        out: dict[str, Any] = {"count": self.count, "count_by_kind": dict(self.by_kind)}
        if self.found:
            out["first_violation_ns"] = min(at for at, _ in self.found)
        return out
