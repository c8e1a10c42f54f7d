"""The fast path of `history.load_ops`: a well-formed history read in chunks, paired in one pass.

`fast_ops(path)` decodes the file a chunk of lines at a time (one msgspec `decode_lines` call per
chunk, into the same `Line` schema as the exact reader), checks the indexes of a whole chunk in
C, and pairs invokes with completions in a single loop that keeps one entry per process (its last
event), so every rule of the exact reader costs one dict lookup. It gives up, returning None, at
the first thing out of the ordinary (a line that does not decode, a blank line, an index out of
sequence, a pairing or ordering problem, a value the checks cannot use): `load_ops` then reads
the file again with the exact, line-at-a-time reader, which names the line and the problem. The
two agree on every well-formed history (tests/checker/test_fastload.py), so this path changes
speed only, never a verdict.

Why: on the 1,000,009-event benchmark history, the line-at-a-time loop spent twice the decode
time on Python bookkeeping (a tuple per invoke, a placeholder slot per op, two dict updates per
event); this loop does about half of that (benchmarks/bench_checker.py).
"""

from __future__ import annotations

import itertools
import operator
from pathlib import Path
from typing import Any, Final

import msgspec

from fencecheck.checker.base import NEMESIS, Op
from fencecheck.checker.reader import DECODER, USUAL, Line, value_problem

CHUNK_BYTES: Final = 8 << 20  # bounds the memory of undecoded text and Line structs at once
_INDEX = operator.attrgetter("index")


class _Irregular(Exception):
    """Something the fast path does not judge: the exact reader will."""


def _lines(path: Path) -> Any:
    """Each chunk of the file's lines, decoded; raises _Irregular where the exact reader might
    not read the text as this does (bad UTF-8, blank lines, lines that are not one object)."""
    start = 0
    with open(path, "rb") as fh:
        rest = b""
        while True:
            block = fh.read(CHUNK_BYTES)
            if not block:
                text, rest = rest, b""
            else:
                cut = block.rfind(b"\n") + 1
                if cut == 0:
                    rest += block
                    continue
                text, rest = rest + block[:cut], block[cut:]
            if not text:
                return
            if not text.isascii():
                try:
                    text.decode("utf-8")  # msgspec skips unknown field names unchecked
                except UnicodeDecodeError:
                    raise _Irregular from None
            try:
                lines = DECODER.decode_lines(text)
            except (msgspec.MsgspecError, RecursionError):
                raise _Irregular from None
            # decode_lines skips blank lines and reads an object across lines or two on one:
            # the exact reader calls those errors, so only one object per line passes here
            if len(lines) != text.count(b"\n") + (not text.endswith(b"\n")):
                raise _Irregular
            if not all(map(operator.eq, map(_INDEX, lines), itertools.count(start))):
                raise _Irregular
            start += len(lines)
            yield lines


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
                raise _Irregular  # msgspec skips unknown field names unchecked: read exactly
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
            f = d.f
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
