"""The fast path of `history.load_ops`: a well-formed history read, paired and checked in one pass.

`fast_ops(path)` decodes each line into the exact reader's `Line` schema and pairs invokes with
completions in a single loop that keeps one entry per process (its last event), so each rule of
the exact reader (index in sequence, time not going backwards, one op at a time, no reuse of a
retired process, a value the checks can use, no key written twice in one object: checker.reader
`keys_unique`, one count of the line's colons) costs a comparison or one dict lookup. Blank lines
at the very end are the end of the history (an editor's or a `>>`'s last newline). It gives up,
returning None, at the first thing out of the ordinary (a line that does not decode or is not
UTF-8, an index out of sequence, a pairing or ordering problem, a value the checks cannot use):
`load_ops` then reads the file again with the exact reader, which names the line and the
problem. The two agree on every well-formed history (tests/checker/test_fastload.py), so this
path changes speed only, never a verdict.

Why: on the 1,000,009-event benchmark history the exact loop spent twice the decode time on
bookkeeping (a tuple per invoke, a placeholder slot per op, two dict updates per event); this one
spends about half that. Where the time goes is mostly cache misses: the checks walk half a
million ops several times, so what is shared (one string per `f`) is read from cache and what
is per op is touched as few times as possible (benchmarks/bench_checker.py).
"""

from __future__ import annotations

from pathlib import Path
from sys import intern
from typing import Any

import msgspec

from fencecheck.checker.base import NEMESIS, Op
from fencecheck.checker.reader import DECODER, USUAL, Line, keys_unique, value_problem


class _Irregular(Exception):
    """Something the fast path does not judge: the exact reader will."""


def _checked(op: Op) -> Op:
    usual = USUAL.get(op.f)
    if usual is not None and op.process != NEMESIS:
        v = op.value
        if not (v is not None and usual(v)) and value_problem(op) is not None:
            raise _Irregular
    return op


def _pair(path: Path) -> list[Op]:
    # Each op has a slot in `ops`, in invoke order, taken at its invoke: it holds the invoke's
    # Line until the completion replaces it with the Op. `last` maps a process to the slot of its
    # latest op, so a process's previous event is always at hand (the Line of an invoke still
    # pending, or the Op whose completion came last).
    last: dict[Any, int] = {}
    ops: list[Any] = []
    append = ops.append
    make = Op
    line_type = Line
    usual = USUAL
    nemesis = NEMESIS
    decode = DECODER.decode
    n = 0
    with open(path, "rb") as fh:
        for raw in fh:
            if not raw.isascii():
                try:
                    raw.decode("utf-8")  # msgspec skips unknown field names unchecked
                except UnicodeDecodeError:
                    raise _Irregular from None
            try:
                d = decode(raw)
            except msgspec.DecodeError:
                if raw.strip() or fh.read().strip():
                    raise _Irregular from None  # not JSON, or a blank line before the end
                break
            # No key twice in one object: at most as many colons as the keys decoded (its five
            # fields, a value's own keys and "value"; for a null value, the writer's
            # `"value":null}` at the end); any other line is held to checker.reader's
            # `keys_unique`. One count of the line's colons is the whole cost.
            v = d.value
            k = raw.count(b":")
            if (k - len(v) > 6 if v is not None
                    else k > 5 and (k > 6 or not raw.endswith(b'"value":null}\n'))) \
                    and not keys_unique(raw, d):
                raise _Irregular
            if d.index != n:
                raise _Irregular
            n += 1
            p = d.process
            slot = last.get(p)
            if d.type == "invoke":
                if slot is not None:
                    prev = ops[slot]
                    # busy, going back in time, or retired by an info
                    if (type(prev) is line_type or d.time < prev.end_time
                            or (prev.type == "info" and p != nemesis)):
                        raise _Irregular
                last[p] = len(ops)
                append(d)
                continue
            if slot is None:
                raise _Irregular
            inv = ops[slot]
            # one shared string per name: every later `op.f == "read"` is then an identity
            # test on an object in cache, not a read of half a million scattered strings
            f = intern(d.f)
            if type(inv) is not line_type or inv.f != f or d.time < inv.time:
                raise _Irregular
            v = inv.value
            cv = d.value
            if cv is not None:
                if v is None:
                    v = cv
                else:
                    v.update(cv)  # both dicts are fresh from the decoder: ours
            op = make(p, f, d.type, inv.index, inv.time, d.index, d.time, v, d.error)
            check = usual.get(f)
            if check is not None and not (v is not None and check(v)):
                _checked(op)
            ops[slot] = op
    for p, slot in last.items():
        d = ops[slot]
        if type(d) is line_type:  # never completed: info with no end
            ops[slot] = _checked(make(p, intern(d.f), "info", d.index, d.time, None, None,
                                      d.value))
    return ops


def fast_ops(path: Path) -> list[Op] | None:
    """The ops of a well-formed history file in invoke order, or None: read it exactly."""
    try:
        return _pair(path)
    except (_Irregular, msgspec.MsgspecError, RecursionError):
        return None
