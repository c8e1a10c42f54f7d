"""The `counter` check: no increment was lost (`lost-update`).

The workload adds one to a key's value with every write, starting from 0, so a read that began
after n writes to the key had been accepted must return at least n. Only the last ok read of each
key is judged (the final read), and only when it returned an integer; indeterminate writes can
only raise the value, so they never make a finding.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

from fencecheck.checker.base import CheckResult, Op, op_ref
from fencecheck.checker.grants import (
    Collector,
    GrantTable,
    build_grants,
    seconds,
    who,
    write_columns,
)
from fencecheck.checker.registry import CheckSpec, KindSpec


def counter(ops: Sequence[Op], *, grants: GrantTable | None = None) -> CheckResult:
    """Find `lost-update`s. Pass `grants` to reuse its index of reads and writes by key."""
    table = grants if grants is not None else build_grants(ops)
    found = Collector()
    judged = 0
    for key, read in table.last_reads.items():
        value = read.get("value")
        if type(value) is not int:
            continue
        judged += 1
        # accepted writes have an end; count those that ended before the read began
        oks = sorted(write_columns(table, key).ok) if key in table.writes else []
        before = bisect_left(oks, read.time)
        if value < before:
            ws = sorted(table.writes[key], key=lambda w: w.end_time or 0)
            last = ws[before - 1]
            found.add(
                read.time, "lost-update",
                f'{who(read.process)}\'s last read of key "{key}" at {seconds(read.time)} '
                f"returned {value}, but {before} writes to it (one increment each) had been "
                f"accepted before that read began, the last at {seconds(last.end_time or 0)}",
                (op_ref(last), op_ref(read)), key=key,
            )
    details = found.details()
    details["keys_judged"] = judged
    if judged == 0:
        return CheckResult("counter", True, skipped="no key has a final read of an integer",
                           details=details)
    return CheckResult("counter", found.count == 0, found.reported(), details=details)


CHECK = CheckSpec(
    name="counter",
    kinds=(
        KindSpec("lost-update",
                 "a key's last ok read is below the number of writes accepted to it "
                 "(each one increment)",
                 "none"),
    ),
    run=lambda ops, table: counter(ops, grants=table),
    order=40,
)
