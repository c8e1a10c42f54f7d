"""The fast path of `history.load_ops`: a well-formed history read, paired and checked in one pass.

`fast_ops(path)` decodes each line into the exact reader's `Line` schema and pairs invokes with
completions in a single loop that keeps one entry per process (its last event), so each rule of
the exact reader (index in sequence, time not going backwards, one op at a time, no reuse of a
retired process, a value the checks can use) costs a comparison or one dict lookup. It gives up,
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

import operator
from pathlib import Path
from sys import intern
from typing import Any

import msgspec

from fencecheck.checker.base import NEMESIS, Op
from fencecheck.checker.reader import DECODER, USUAL, Line, value_problem

_INDEX = operator.attrgetter("index")


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
    last: dict[Any, Line] = {}  # process -> its last event
    ops: list[Op] = []
    append = ops.append
    make = Op
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
            d = decode(raw)
            if d.index != n:
                raise _Irregular
            n += 1
            p = d.process
            prev = last.get(p)
            if d.type == "invoke":
                if prev is not None and (prev.type == "invoke" or d.time < prev.time
                                         or (prev.type == "info" and p != nemesis)):
                    raise _Irregular
                last[p] = d
                continue
            # one shared string per name: every later `op.f == "read"` is then an identity
            # test on an object in cache, not a read of half a million scattered strings
            f = intern(d.f)
            if prev is None or prev.type != "invoke" or prev.f != f or d.time < prev.time:
                raise _Irregular
            last[p] = d
            v = prev.value
            cv = d.value
            if cv is not None:
                if v is None:
                    v = cv
                else:
                    v.update(cv)  # both dicts are fresh from the decoder: ours
            op = make(p, f, d.type, prev.index, prev.time, d.index, d.time, v, d.error)
            check = usual.get(f)
            if check is not None and not (v is not None and check(v)):
                _checked(op)
            append(op)
    for p, d in last.items():
        if d.type == "invoke":  # never completed: info with no end
            append(_checked(make(p, d.f, "info", d.index, d.time, None, None, d.value)))
    ops.sort(key=_INDEX)  # appended as they completed; the checks want invoke order
    return ops


def fast_ops(path: Path) -> list[Op] | None:
    """The ops of a well-formed history file in invoke order, or None: read it exactly."""
    try:
        return _pair(path)
    except (_Irregular, msgspec.MsgspecError, RecursionError):
        return None
