"""A check from outside the tree: `demo-acquires` counts the acquires that completed and flags
none (its kind `demo-unseen` is a column of the comparison all the same)."""

from __future__ import annotations

from collections.abc import Sequence

from fencecheck.checker.base import CheckResult, Op
from fencecheck.checker.grants import GrantTable
from fencecheck.checker.registry import CheckSpec, KindSpec


def demo(ops: Sequence[Op], table: GrantTable) -> CheckResult:
    acquired = sum(1 for op in ops if op.f == "acquire" and op.type == "ok")
    return CheckResult("demo-acquires", True, details={"count": 0, "acquired": acquired})


CHECK = CheckSpec("demo-acquires", (KindSpec("demo-unseen", "never reported", "none"),),
                  run=demo, order=90)
