"""Side tables the grant table fills in its one pass over the ops, for the checks and statistics.

- `WriteColumns`: one key's accepted writes as columns (invoke and ok times, tokens, grants).
- `OpTally`: what the statistics count.

Why in that pass: the checks walk half a million ops; an op read while it is in the CPU's cache
costs a fraction of one read in a pass of its own, which is mostly cache misses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import le
from typing import Any

from fencecheck.checker.base import Op, Process


@dataclass(slots=True)
class WriteColumns:
    """A key's accepted writes (GrantTable.writes) as columns, for the fencing, exclusion and
    counter sweeps; filled in build_grants' pass, while each op is still in the CPU's cache (a
    pass of their own over half a million ops costs as much again in cache misses)."""

    inv: list[int] = field(default_factory=list)  # invoke times
    ok: list[int] = field(default_factory=list)  # completion times (accepted writes completed)
    tokens: list[Any] = field(default_factory=list)  # the value's token, as written
    gids: list[int | None] = field(default_factory=list)  # write_grant of each, or None
    _ordered: bool | None = None

    @property
    def ordered(self) -> bool:
        """Invoke times never decrease along the list and no write completed before it began,
        so that w1.ok < w2.invoke puts w1 before w2 in the list."""
        if self._ordered is None:
            inv = self.inv
            # `inv == sorted(inv)`: a sorted list of ints is one run to the sort, compared in C
            # without a call a pair (4x faster than all(map(le, ...)) on the benchmark's keys)
            self._ordered = inv == sorted(inv) and all(map(le, inv, self.ok))
        return self._ordered


@dataclass(frozen=True, slots=True)
class OpTally:
    """What the statistics count (checker.analyze.stats), gathered in build_grants' pass while
    each op is in the CPU's cache: a pass of their own over half a million ops costs as much again
    in cache misses."""

    per_f: dict[str, int]  # client ops by f
    not_ok: dict[tuple[str, str], int]  # client ops by (f, type), type fail or info
    processes: set[Process]  # client processes
    unfinished: list[Op]  # every op never completed, the nemesis' too
    granted_writes: list[Op]  # accepted writes that belong to a grant (write_grant)
    last_end: int  # the latest completion time of any op
    rejected_writes: int  # client writes failed with error stale-token
    # granted_writes' invoke times and grants: the statistics compare them with the grants'
    # expiry as columns, without reading each write again (an op out of cache costs more than
    # the two appends that kept these while it was in cache)
    granted_times: list[int] = field(default_factory=list)
    granted_gids: list[int] = field(default_factory=list)
