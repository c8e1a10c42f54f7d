"""Side tables the grant table fills in its one pass over the ops, for the checks and statistics.

- `WriteColumns`: one key's accepted writes as columns (invoke and ok times, tokens, grants).
- `OpTally`: what the statistics count.

Why in that pass: the checks walk half a million ops; an op read while it is in the CPU's cache
costs a fraction of one read in a pass of its own, which is mostly cache misses.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import compress, islice, repeat
from operator import and_, attrgetter, eq, is_, le, methodcaller, ne, not_
from typing import Any, Final

from fencecheck.checker.base import NEMESIS, Op, Process


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
            self._ordered = (all(map(le, inv, islice(inv, 1, None)))
                             and all(map(le, inv, self.ok)))
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


_F: Final = attrgetter("f")
_TYPE: Final = attrgetter("type")
_PROCESS: Final = attrgetter("process")
_TIME: Final = attrgetter("time")
_END: Final = attrgetter("end_time")
_VALUE: Final = attrgetter("value")
_GET_KEY: Final = methodcaller("get", "key")
_GET_TOKEN: Final = methodcaller("get", "token")


@dataclass(slots=True)
class Sorted:
    """A history's ops sorted out by C-level passes (map, compress, Counter) before
    build_grants' loop, which then walks only `rest`: the client ops that are not reads. A
    read's only part in the grant table is the last ok read of its key (`last_reads`), which
    `dict(zip(keys, reads))` finds in C."""

    nemesis: list[Op]  # the nemesis' ops
    rest: list[Op]  # client ops other than reads, in invoke order
    last_reads: dict[str, Op]  # key -> the ok read invoked last
    per_f: dict[str, int]  # client ops by f, in order of first appearance
    not_ok: dict[tuple[str, str], int]  # client ops by (f, type), type fail or info
    processes: set[Process]  # client processes
    unfinished: list[Op]  # every op never completed, the nemesis' too
    last_end: int  # the latest completion time of any op
    rejected_writes: int  # client writes failed with error stale-token


def sort_ops(ops: Sequence[Op]) -> Sorted:
    """Sort out `ops` (in invoke order) for build_grants; see `Sorted`."""
    procs = list(map(_PROCESS, ops))
    fs = list(map(_F, ops))
    # the nemesis is the one process that is a string (a client's may be too, in a hand-made
    # history: compared, not assumed)
    nem_at = [i for i in compress(range(len(procs)), map(is_, map(type, procs), repeat(str)))
              if procs[i] == NEMESIS]
    is_read = list(map(eq, fs, repeat("read")))
    if nem_at:
        client = [True] * len(procs)
        for i in nem_at:
            client[i] = False
        is_read = list(map(and_, is_read, client))
        is_rest = list(map(and_, map(not_, is_read), client))
        per_f = Counter(compress(fs, client))
    else:
        is_rest = list(map(not_, is_read))
        per_f = Counter(fs)
    processes = set(procs)
    processes.discard(NEMESIS)
    not_ok: dict[tuple[str, str], int] = {}
    rejected = 0
    for op in compress(ops, map(ne, map(_TYPE, ops), repeat("ok"))):
        if op.process != NEMESIS:
            k = (op.f, op.type)
            not_ok[k] = not_ok.get(k, 0) + 1
            rejected += (op.f == "write" and op.type == "fail" and op.error == "stale-token")
    ends = list(map(_END, ops))
    reads = list(compress(ops, is_read))
    return Sorted([ops[i] for i in nem_at], list(compress(ops, is_rest)), last_reads(reads),
                  dict(per_f), not_ok, processes, list(compress(ops, map(is_, ends, repeat(None)))),
                  max(0, max(filter(None, ends), default=0)), rejected)


def last_reads(reads: list[Op]) -> dict[str, Op]:
    """Key -> the ok read invoked last, of client reads in invoke order."""
    done = list(compress(reads, map(eq, map(_TYPE, reads), repeat("ok"))))
    values = list(map(_VALUE, done))
    if not any(map(is_, values, repeat(None))):
        keys = list(map(_GET_KEY, values))
        if all(map(is_, map(type, keys), repeat(str))):
            return dict(zip(keys, done, strict=True))  # the last of equal keys stays
    out: dict[str, Op] = {}
    for op, v in zip(done, values, strict=True):
        key = None if v is None else v.get("key")
        if type(key) is str:
            out[key] = op
    return out


def key_columns(writes: dict[str, list[Op]], gids: dict[str, list[int | None]]
                  ) -> dict[str, WriteColumns]:
    """Each key's accepted writes as columns (their grants found by build_grants' loop)."""
    return {key: WriteColumns(list(map(_TIME, ws)), list(map(_END, ws)),
                              list(map(_GET_TOKEN, map(_VALUE, ws))), gids[key])
            for key, ws in writes.items()}
