"""The grant table's pass over reads, writes and the nemesis' ops (checker.grants.build_grants).

`rw_pass(ops, lock_op, state)` walks the ops in invoke order: it tallies every op for the
statistics, handles each read (the last ok read of each key), each write (the grant it was made
under, its key's columns) and each nemesis op, and hands every other op, the lock operations, to
`lock_op` in turn, which keeps the grants (and `state.last_pl`, the grant a write belongs to).
Reads and writes are most ops of a history; this pass is compiled from checker/_rwpass.c where
that is built (checker.native), and the loop below is its reference: the two
are held equal by tests/unit/checker/test_loops.py (every shipped history, simulated ones,
hand-made ops of any shape). Returns (last_end, reads, writes, rejected, jobs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fencecheck.checker.base import NEMESIS, Op, Process
from fencecheck.checker.native import compiled
from fencecheck.checker.reader import HOT_KEYS
from fencecheck.checker.tally import WriteColumns


def job_key(key: Any) -> bool:
    """A cron job's key: job:<n> (checker.jobs)."""
    return type(key) is str and key.startswith("job:") and key[4:].isdigit()


@dataclass(slots=True)
class PassState:
    """What the pass fills (and `last_pl`, which `lock_op` fills and writes read)."""

    per_f: dict[str, int] = field(default_factory=dict)  # client ops by f, in order of first sight
    not_ok: dict[tuple[str, str], int] = field(default_factory=dict)  # not ok, by (f, type)
    processes: set[Process] = field(default_factory=set)
    unfinished: list[Op] = field(default_factory=list)
    nemesis_ops: list[Op] = field(default_factory=list)
    last_reads: dict[str, Op] = field(default_factory=dict)  # key -> the ok read invoked last
    last_pl: dict[tuple[Process, Any], int] = field(default_factory=dict)  # -> latest grant id
    write_grant: dict[int, int] = field(default_factory=dict)  # write's invoke index -> grant
    granted_writes: list[Op] = field(default_factory=list)
    granted_times: list[int] = field(default_factory=list)  # their invoke times and grants
    granted_gids: list[int] = field(default_factory=list)
    writes: dict[str, list[Op]] = field(default_factory=dict)  # key -> accepted writes
    columns: dict[str, WriteColumns] = field(default_factory=dict)
    # per key, the lists its writes are appended to: (writes, inv, ok, tokens, gids)
    appends: dict[str, tuple[list[Any], ...]] = field(default_factory=dict)


def _rw_pass(ops: Sequence[Op], lock_op: Callable[[Op], None],
             st: PassState) -> tuple[int, int, int, int, int]:
    # msgspec's own key strings: a lookup stops at the identity test (reader.decoded_keys)
    key_, lock_, token_, _, _, job_ = HOT_KEYS
    per_f, not_ok, processes, unfinished = st.per_f, st.not_ok, st.processes, st.unfinished
    nemesis_ops, last_reads, last_pl, write_grant = (st.nemesis_ops, st.last_reads, st.last_pl,
                                                     st.write_grant)
    granted_writes, granted_times, granted_gids = (st.granted_writes, st.granted_times,
                                                   st.granted_gids)
    writes, columns, appends = st.writes, st.columns, st.appends
    last_end = rejected = reads = n_writes = jobs = 0
    for op in ops:
        f = op.f
        t = op.type
        p = op.process
        end = op.end_time
        if end is None:
            unfinished.append(op)
        elif end > last_end:
            last_end = end
        if p == NEMESIS:
            nemesis_ops.append(op)
            continue
        # tallied here, where the op is in cache, for checker.analyze.stats
        processes.add(p)
        if t != "ok":
            k = (f, t)
            not_ok[k] = not_ok.get(k, 0) + 1
        if f == "read":
            if not reads:
                per_f[f] = 0  # its place in the order of first appearance; counted after
            reads += 1
            if t == "ok":
                v = op.value
                rkey = None if v is None else v.get(key_)
                if type(rkey) is str:
                    last_reads[rkey] = op
            continue
        if f != "write":
            lock_op(op)
            continue
        v = op.value
        if not n_writes:
            per_f[f] = 0
        n_writes += 1
        if t != "ok":
            if t == "fail" and op.error == "stale-token":
                rejected += 1
            # a cron job's execution: its value's "job", or a key job:<n> (checker.jobs); the
            # keys of ok writes without "job" are looked at once each, after the pass
            if v is not None:
                if job_ in v:
                    jobs += type(v[job_]) is int or job_key(v.get(key_))
                elif job_key(v.get(key_)):
                    jobs += 1
            continue
        if v is None:
            continue
        rkey = v.get(key_)
        wlock = v.get(lock_)
        gid = last_pl.get((p, wlock)) if type(wlock) is str else None
        if gid is not None:
            write_grant[op.index] = gid
            granted_writes.append(op)
            granted_times.append(op.time)
            granted_gids.append(gid)
        # A cron job's execution (it carries "job") is judged by the jobs check, which knows
        # whether duplicates are harmless or deduplicated, not as a counter write.
        if job_ in v:
            jobs += type(v[job_]) is int or job_key(rkey)
        elif type(rkey) is str:
            try:
                kw, inv, ok, tokens, gids = appends[rkey]  # found but once a key
            except KeyError:
                kw = writes[rkey] = []
                cols = columns[rkey] = WriteColumns()
                inv, ok, tokens, gids = cols.inv, cols.ok, cols.tokens, cols.gids
                appends[rkey] = (kw, inv, ok, tokens, gids)
            kw.append(op)
            inv.append(op.time)
            ok.append(end)  # type: ignore[arg-type]  # ok: completed
            tokens.append(v.get(token_))
            gids.append(gid)
    return last_end, reads, n_writes, rejected, jobs


def _native() -> Callable[[Sequence[Op], Callable[[Op], None], PassState],
                          tuple[int, int, int, int, int]] | None:
    module = compiled("_rwpass", Op, NEMESIS, *HOT_KEYS[:3], HOT_KEYS[5], job_key, WriteColumns)
    if module is None:
        return None
    pass_: Callable[[Sequence[Op], Callable[[Op], None], PassState],
                    tuple[int, int, int, int, int]] = module.rw_pass
    return pass_


# _rwpass.rw_pass where it is built, else the loop above: every history gives the same table
NATIVE = _native()


def rw_pass(ops: Sequence[Op], lock_op: Callable[[Op], None],
            st: PassState) -> tuple[int, int, int, int, int]:
    """The pass (see the module's doc): compiled where it is built."""
    native = NATIVE
    if native is not None and type(ops) is list:
        out = native(ops, lock_op, st)
        if out is not NotImplemented:  # it is, for ops of another type than Op
            return out
    return _rw_pass(ops, lock_op, st)
