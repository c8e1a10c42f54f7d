"""The fast path of `history.load_ops`: a well-formed history read, paired and checked in one pass.

`fast_ops(path)` decodes each line into its record (`Line`, fencecheck.records.history, the exact
reader's too) and pairs invokes with completions in a single loop that keeps one entry per process
(its last event), so each rule of the exact reader (index in sequence, time not going backwards,
one op at a time, no reuse of a retired process, a value the checks can use) costs a comparison or
one dict lookup. Blank lines at the very end are the end of the history (an editor's or a `>>`'s
last newline). It gives up, returning None, at the first thing out of the ordinary (a line that
does not decode or is not UTF-8, an index out of sequence, a pairing or ordering problem, a value
the checks cannot use): `load_ops` then reads the file again with the exact reader, which names the
line and the problem. The two agree on every well-formed history
(tests/unit/checker/test_fastload.py), so this path changes speed only, never a verdict.

No key twice in one object (I-JSON; msgspec keeps the last of two): every key is followed by a
colon outside any string, so a line has at most as many keys as colons, and the keys a decoded
line shows (five fields, `value` when not null, the value's own keys, `error`) are distinct. The
file is read in blocks whose colons are counted in one call each; if they are no more than the
keys its lines show, no line repeats a key. Lines whose keys decoding cannot show (an `error`, a
null value not written as the writer's `"value":null}` at the end) are held to checker.reader's
`keys_unique` one by one and counted as they are. A file with more colons than that (a repeated
key, or only an unknown field, a nested object or a colon in a string such as a lock named
`orders:1`) goes to the exact reader, which is as fast as every history was before this path.
Cost on the benchmark history: the count is paid for by reading in blocks (a BytesIO iterates
lines faster than the file); counting the keys the lines show is 0 to 0.15 s of CPU in 1.1 to 1.4
(the medians of 9 alternating runs equal, the minimums 13% apart, on a shared 2-core machine).

Why: on the 1,000,009-event benchmark history the exact loop spent twice the decode time on
bookkeeping (a tuple per invoke, a placeholder slot per op, two dict updates per event); this one
spends about half that. Where the time goes is mostly cache misses: the checks walk half a
million ops several times, so what is shared (one string per `f`) is read from cache and what
is per op is touched as few times as possible (benchmarks/bench_checker.py). For the same
reason a read's or write's `key` and `lock` are replaced by the one string of that name: 100
bytes less an op, 44 MB less on the benchmark history, 12% fewer pages to fault in
(docs/checker-speed.md).
"""

from __future__ import annotations

from collections.abc import Callable
from io import BytesIO
from pathlib import Path
from sys import intern
from typing import Any

import msgspec

from fencecheck.checker.base import NEMESIS, Op
from fencecheck.checker.native import compiled
from fencecheck.checker.reader import (
    _INT_OR_NULL,
    _STR_OR_NULL,
    KEY_NAME,
    LOCK_NAME,
    TOKEN_NAME,
    USUAL,
    keys_unique,
    value_problem,
)
from fencecheck.records.history import DECODER, Line

# Bytes read at a time: under glibc's mmap threshold (128 KiB), so a block reuses the memory of
# the one before. A 1 MiB block was mapped and unmapped each time: 10,400 of the load's 74,700
# page faults on the benchmark history (2 to 3 us of system time each on this VM), for the same
# instructions (docs/checker-speed.md).
_BLOCK = 1 << 16


class _Irregular(Exception):
    """Something the fast path does not judge: the exact reader will."""


def _checked(op: Op) -> Op:
    usual = USUAL.get(op.f)
    if usual is not None and op.process != NEMESIS:
        v = op.value
        if not (v is not None and usual(v)) and value_problem(op) is not None:
            raise _Irregular
    return op


def _line_keys(raw: bytes, d: Line) -> int:
    """A line the file's count cannot vouch for (an error, a null value written otherwise):
    held to `keys_unique`, and its colons counted as keys it shows, beyond the six of every line
    and its value's (counted with its op)."""
    if not keys_unique(raw, d):
        raise _Irregular
    v = d.value
    return raw.count(b":") - 6 - (len(v) if v is not None else 0)


_NULL_END = b'"value":null}\n'  # how the writer ends a line whose value is null


def _native() -> Callable[..., tuple[int, int, int, int]] | None:
    """The pairing loop compiled from _pairing.c (checker.native), or None: the Python loop
    below, which reads the same."""
    module = compiled("_pairing", Line, Op, DECODER.decode, msgspec.DecodeError, _Irregular,
                      NEMESIS, intern("read"), intern("write"), KEY_NAME, LOCK_NAME, TOKEN_NAME,
                      USUAL, _line_keys, _checked, _NULL_END)
    if module is None:
        return None
    pair_chunk: Callable[..., tuple[int, int, int, int]] = module.pair_chunk
    return pair_chunk


# _pairing.pair_chunk, or None where it is not built: every history reads the same either way
# (tests/unit/checker/test_fastload.py runs each of its tests with both)
NATIVE = _native()


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
    f_read, f_write = intern("read"), intern("write")
    str_or_null, int_or_null = _STR_OR_NULL, _INT_OR_NULL
    nemesis = NEMESIS
    # msgspec's own key strings: a lookup stops at the identity test (reader.decoded_keys)
    key_, lock_, token_ = KEY_NAME, LOCK_NAME, TOKEN_NAME
    share_names: dict[str, str] = {}  # the one string of each key and lock name
    share = share_names.setdefault
    decode = DECODER.decode
    n = 0
    shown = 0  # keys the decoded lines show beyond six a line (see `_unique_keys`)
    colons = 0
    null_end = _NULL_END
    size = len
    native = NATIVE
    with open(path, "rb") as fh:
        read = fh.read
        readline = fh.readline
        while chunk := read(_BLOCK):
            if chunk[-1] != 10:
                chunk += readline()
            colons += chunk.count(b":")
            if not chunk.isascii():
                try:
                    chunk.decode("utf-8")  # msgspec skips unknown field names unchecked
                except UnicodeDecodeError:
                    raise _Irregular from None
            if native is not None:  # the same loop in C
                n, shown, start, stop = native(chunk, last, ops, share_names, n, shown)
                if start < 0:
                    continue
                if chunk[start:stop].strip() or chunk[stop:].strip() or fh.read().strip():
                    raise _Irregular  # not JSON, or a blank line before the end
                break
            lines = BytesIO(chunk)
            for raw in lines:
                try:
                    d = decode(raw)
                except msgspec.DecodeError:
                    if raw.strip() or lines.read().strip() or fh.read().strip():
                        raise _Irregular from None  # not JSON, or a blank line before the end
                    break
                if d.index != n:
                    raise _Irregular
                n += 1
                p = d.process
                try:
                    slot = last[p]  # a subscript: cheaper than a call to get, and rarely missing
                except KeyError:
                    slot = None
                if d.type == "invoke":
                    if slot is not None:
                        prev = ops[slot]
                        # busy, going back in time, or retired by an info
                        if (type(prev) is line_type or d.time < prev.end_time
                                or (prev.type == "info" and p != nemesis)):
                            raise _Irregular
                    if d.value is None and not raw.endswith(null_end):
                        shown += _line_keys(raw, d)
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
                # the keys of the invoke's value and of this line's are counted here, while
                # they are in cache; the other keys a line shows are the six of every line
                v = inv.value
                cv = d.value
                if cv is not None:
                    if v is None:
                        v = cv
                        shown += size(cv)
                    else:
                        shown += size(v) + size(cv)
                        v.update(cv)  # both dicts are fresh from the decoder: ours
                    if d.error is not None:
                        shown += _line_keys(raw, d)
                else:
                    if v is not None:
                        shown += size(v)
                    if d.error is not None or not raw.endswith(null_end):
                        shown += _line_keys(raw, d)
                op = make(p, f, d.type, inv.index, inv.time, d.index, d.time, v, d.error)
                if f is f_read or f is f_write:  # most ops: USUAL's test inlined
                    if (v is None or type(k := v.get(key_)) is not str
                            or type(lk := v.get(lock_)) not in str_or_null
                            or type(v.get(token_)) not in int_or_null):
                        _checked(op)
                    else:
                        # one string per key and lock name, not one per op: 100 bytes less
                        # an op, so fewer pages to fault in and fewer cache misses later
                        v[key_] = share(k, k)
                        if lk is not None:
                            v[lock_] = share(lk, lk)
                else:
                    check = usual.get(f)
                    if check is not None and not (v is not None and check(v)):
                        _checked(op)
                ops[slot] = op
            else:
                continue
            break
    pending = [(p, slot) for p, slot in last.items() if type(ops[slot]) is line_type]
    shown += sum(len(ops[slot].value) for _, slot in pending if ops[slot].value is not None)
    if colons > 6 * n + shown:
        raise _Irregular  # a key written twice somewhere, or a line to look at: the exact reader
    for p, slot in pending:  # never completed: info with no end
        d = ops[slot]
        ops[slot] = _checked(make(p, intern(d.f), "info", d.index, d.time, None, None, d.value))
    return ops


def fast_ops(path: Path) -> list[Op] | None:
    """The ops of a well-formed history file in invoke order, or None: read it exactly."""
    try:
        return _pair(path)
    except (_Irregular, msgspec.MsgspecError, RecursionError):
        return None
