"""Reading, validating, pairing and writing histories (history.jsonl).

- `read_events(path)`: stream the events of a history file, each line validated.
- `pair(events)`: pair invokes with their completions into `Op`s, per process.
- `load_ops(path)`: read, validate and pair in one pass; the fast path the checker uses.
- `load_lines(lines, src)`: the same rules for lines already decoded, each with its line number
  (a JSON document's events: checker.jsondoc).
- `write_events(path, events)`: the inverse of `read_events`.

Every line goes through the one strict reader (checker.reader: a msgspec schema for the line, a
table for what the checks read from values). Every problem is a `HistoryError(path, line, what)`
whose message reads like a compiler error: `history.jsonl:17: time: expected int >= 0, got str`.
Times never go backwards within one process; across processes they may be out of order (logs merged
from several hosts). A process does one op at a time, except that a lost-lock `notice` (an invoke
and its ok at one instant) may come while an op of its own is in flight. Blank lines at the very end
are the end of the file (a trailing newline too many, from an editor or `echo >>`); a blank line
before another event is bad input, since one JSON object per line is the format and a hole in it
usually means a damaged merge. A key written twice in one object is bad input too, named
(checker.reader `repeated_key`).
"""

from __future__ import annotations

import gc
import json
import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from fencecheck.checker.base import (
    EVENT_TYPES,
    NEMESIS,
    Completion,
    Event,
    HistoryError,
    Op,
    Process,
)
from fencecheck.checker.fastload import fast_ops
from fencecheck.checker.reader import (
    DECODER,
    VALUES,
    Line,
    check_value,
    decode_line,
    keys_unique,
    repeated_key,
    repeated_message,
)
from fencecheck.records.history import NOTICE, encode_line

_CHECKED_FS = frozenset(VALUES)

log = logging.getLogger(__name__)

_TYPES_TEXT = "invoke, ok, fail, info"


def _describe(x: Any) -> str:
    """A JSON value as the user wrote it, for messages."""
    return json.dumps(x) if not isinstance(x, dict | list) else type(x).__name__


def _check_order(src: str, lineno: int, index: int, expected: int) -> None:
    if index != expected:
        raise HistoryError(
            src, lineno, f"index: {index} out of sequence (expected {expected}: 0, 1, 2, ...)"
        )


def _previous(path: Path, p: Process, lineno: int) -> tuple[int, int]:
    """(time, line) of process p's last event before line `lineno` (for the message only)."""
    found = (0, 0)
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            if n >= lineno:
                break
            d = DECODER.decode(raw)
            if d.process == p:
                found = (d.time, n)
    return found


def _backwards(src: str, lineno: int, p: Process, time: int, before: tuple[int, int]) -> None:
    raise HistoryError(
        src, lineno, f"time: goes backwards for process {p} ({time} ns after {before[0]} ns "
                     f"on line {before[1]})")


@dataclass(slots=True)
class _Pending:
    """An invoke waiting for its completion; `slot` is where its Op goes in the output."""

    slot: int
    index: int
    time: int
    f: str
    value: dict[str, Any] | None
    line: int


class _Pairer:
    """Pairing state shared by `pair` and `read_events`: which processes are busy or retired."""

    def __init__(self, src: str, keep: bool = True) -> None:
        self.src = src
        self.keep = keep  # False: validate only, build no ops (streaming)
        self.pending: dict[Process, _Pending] = {}
        self.aside: dict[Process, _Pending] = {}  # notices that came while an op was in flight
        self.retired: set[Process] = set()
        self.ops: list[Op | None] = []

    def invoke(self, line: int, p: Process, index: int, time: int, f: str,
               value: dict[str, Any] | None) -> None:
        busy = self.pending.get(p)
        if busy is not None and f == NOTICE and busy.f != NOTICE and p not in self.aside:
            # a lost-lock notice while p's op is in flight: paired on its own
            self.aside[p] = _Pending(len(self.ops), index, time, f, value, line)
            if self.keep:
                self.ops.append(None)
            return
        if busy is not None:
            raise HistoryError(
                self.src, line,
                f"process {p} invokes {f} while its {busy.f} invoked on line {busy.line}"
                " has not completed",
            )
        if p in self.retired:
            raise HistoryError(
                self.src, line,
                f"process {p} invokes {f} after an info completion retired it"
                " (a worker goes on under a new process id)",
            )
        self.pending[p] = _Pending(len(self.ops), index, time, f, value, line)
        if self.keep:
            self.ops.append(None)

    def complete(self, line: int, p: Process, type_: str, index: int, time: int, f: str,
                 value: dict[str, Any] | None, error: str | None) -> None:
        inv = self.pending.pop(p, None)
        if f == NOTICE and p in self.aside and (inv is None or inv.f != NOTICE):
            if inv is not None:
                self.pending[p] = inv
            inv = self.aside.pop(p)
        if inv is None:
            raise HistoryError(
                self.src, line, f"{type_} completion of {f} by process {p} without an invoke"
            )
        if inv.f != f:
            raise HistoryError(
                self.src, line,
                f'{type_} completion has f "{f}" but process {p} invoked "{inv.f}"'
                f" on line {inv.line}",
            )
        if type_ == "info" and p != NEMESIS:
            self.retired.add(p)
        if self.keep:
            op = Op(p, f, cast(Completion, type_), inv.index, inv.time, index, time,
                    _merge(inv.value, value), error)
            check_value(op, self.src, inv.line)
            self.ops[inv.slot] = op

    def finish(self) -> list[Op]:
        """Invokes never completed become `info` ops with no end."""
        for p, inv in [*self.pending.items(), *self.aside.items()]:
            op = Op(p, inv.f, "info", inv.index, inv.time, None, None, inv.value)
            if self.keep:
                check_value(op, self.src, inv.line)
                self.ops[inv.slot] = op
        self.pending.clear()
        self.aside.clear()
        return self.ops  # type: ignore[return-value]  # every slot is filled by now


def _merge(inv: dict[str, Any] | None, comp: dict[str, Any] | None) -> dict[str, Any] | None:
    if comp is None:
        return inv
    if inv is None:
        return comp
    return {**inv, **comp}


def pair(events: Iterable[Event], source: str = "<history>") -> list[Op]:
    """Pair invokes with completions per process; ops come out sorted by invoke index.

    An op's value is the invoke's value updated by the completion's. Invokes not completed by the
    end become `info` ops with `end_index`/`end_time` None. Raises `HistoryError` on a completion
    without an invoke, a completion whose f differs from its invoke's, a second invoke by a busy
    process (but a `notice`, which may come while an op of its process is in flight), or reuse of a
    process id retired by `info` (the nemesis is exempt); the line is the event's 1-based position
    in `events`. Importers must present each op as invoke + completion (Jepsen logs nemesis ops as
    info/info: map the first to invoke).
    """
    pairer = _Pairer(source)
    for line, e in enumerate(events, 1):
        if e.type not in EVENT_TYPES:
            what = f"type {_describe(e.type)} is not one of {_TYPES_TEXT}"
            raise HistoryError(source, line, what)
        if e.type == "invoke":
            pairer.invoke(line, e.process, e.index, e.time, e.f, e.value)
        else:
            pairer.complete(line, e.process, e.type, e.index, e.time, e.f, e.value, e.error)
    return pairer.finish()


def read_events(path: Path) -> Iterator[Event]:
    """Stream the events of a history file, validating each line and the pairing as it goes.

    Raises `HistoryError` at the first bad line (events before it have been yielded already).
    """
    src = str(path)
    pairer = _Pairer(src, keep=False)
    last: dict[Process, tuple[int, int]] = {}
    blank = 0  # the first of the blank lines just read: an error only if an event follows
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if not raw.strip():
                blank = blank or lineno
                continue
            if blank:
                decode_line(b"", src, blank)  # raises the empty-line error
            d = decode_line(raw, src, lineno)
            _check_order(src, lineno, d.index, lineno - 1)
            before = last.get(d.process)
            if before is not None and d.time < before[0]:
                _backwards(src, lineno, d.process, d.time, before)
            last[d.process] = (d.time, lineno)
            e = d  # a decoded line is the event record
            if e.type == "invoke":
                pairer.invoke(lineno, e.process, e.index, e.time, e.f, None)
            else:
                pairer.complete(lineno, e.process, e.type, e.index, e.time, e.f, None, None)
            yield e


def load_lines(lines: Iterable[tuple[int, Line]], src: str) -> list[Op]:
    """Validate and pair decoded lines (line number, Line) as `load_ops` does a file's: index
    0, 1, 2, ... in order, time not going backwards within a process, the pairing rules and the
    values the checks read, each problem named with the line given."""
    pairer = _Pairer(src)
    last: dict[Process, tuple[int, int]] = {}
    for n, (lineno, d) in enumerate(lines):
        _check_order(src, lineno, d.index, n)
        before = last.get(d.process)
        if before is not None and d.time < before[0]:
            _backwards(src, lineno, d.process, d.time, before)
        last[d.process] = (d.time, lineno)
        if d.type == "invoke":
            pairer.invoke(lineno, d.process, d.index, d.time, d.f, d.value)
        else:
            pairer.complete(lineno, d.process, d.type, d.index, d.time, d.f, d.value, d.error)
    return pairer.finish()


_make_op = Op  # a msgspec Struct: its constructor is already the fast path


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while building millions of acyclic objects: its collections would
    walk every op built so far, again and again, for nothing (a third of the load time)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def load_ops(path: Path) -> list[Op]:
    """Read, validate and pair a history file in one pass; ops sorted by invoke index.

    A well-formed file takes the fast path (checker.fastload); anything else is read here, line
    by line, to name the first problem exactly.

    Raises `HistoryError(path, line, what)` on the first problem: a line that is empty, not JSON
    or not an object; a missing or mistyped field; index not 0, 1, 2, ...; time going backwards
    within a process; a value the checks cannot use (checker.reader); and the pairing errors of
    `pair`.
    """
    with gc_paused():
        quick = fast_ops(path)
    if quick is not None:
        log.debug("loaded %d ops from %s", len(quick), path)
        return quick
    src = str(path)
    decode = decode_line
    make = _make_op
    # invokes waiting for completion: process -> (slot in ops, index, time, f, value, line)
    pending: dict[Process, tuple[int, int, int, str, dict[str, Any] | None, int]] = {}
    aside: dict[Process, tuple[int, int, int, str, dict[str, Any] | None, int]] = {}  # notices
    retired: set[Process] = set()
    last_time: dict[Process, int] = {}  # process -> the time of its last event
    ops: list[Op | None] = []
    lineno = 0
    nemesis = NEMESIS
    client_fs = _CHECKED_FS

    def pairing_error(d: Any) -> HistoryError:
        """Replay the pairing of this line on a _Pairer holding the same state, to raise the
        same message as `pair` would."""
        pairer = _Pairer(src, keep=False)
        pairer.retired = retired
        for proc, (_, i, t, fn, _, ln) in pending.items():
            pairer.pending[proc] = _Pending(0, i, t, fn, None, ln)
        for proc, (_, i, t, fn, _, ln) in aside.items():
            pairer.aside[proc] = _Pending(0, i, t, fn, None, ln)
        try:
            if d.type == "invoke":
                pairer.invoke(lineno, d.process, d.index, d.time, d.f, None)
            else:
                pairer.complete(lineno, d.process, d.type, d.index, d.time, d.f, None, None)
        except HistoryError as e:
            return e
        return HistoryError(src, lineno, "inconsistent pairing")  # not reached

    fast = DECODER.decode
    blank = 0  # the first of the blank lines just read: an error only if an event follows
    with gc_paused(), open(path, "rb") as fh:
        for raw in fh:
            lineno += 1
            if blank or not raw.strip():
                if not raw.strip():
                    blank = blank or lineno
                    continue
                decode(b"", src, blank)  # raises the empty-line error
            try:
                if not raw.isascii():
                    raise ValueError("not ASCII")  # decode_line checks its UTF-8
                d = fast(raw)
            except Exception:
                d = decode(raw, src, lineno)  # raises the exact problem, or decodes
            else:
                if not keys_unique(raw, d):
                    raise HistoryError(src, lineno, repeated_message(repeated_key(raw)))
            index = d.index
            time = d.time
            p = d.process
            if index != lineno - 1:
                _check_order(src, lineno, index, lineno - 1)
            if time < last_time.get(p, 0):
                _backwards(src, lineno, p, time, _previous(path, p, lineno))
            last_time[p] = time
            type_ = d.type
            f = d.f
            value = d.value
            if type_ == "invoke":
                if p in pending or p in retired:
                    if (f != NOTICE or p in retired or p in aside
                            or pending[p][3] == NOTICE):
                        raise pairing_error(d)
                    # a lost-lock notice while p's op is in flight: paired on its own
                    aside[p] = (len(ops), index, time, f, value, lineno)
                    ops.append(None)
                    continue
                pending[p] = (len(ops), index, time, f, value, lineno)
                ops.append(None)
            else:
                inv = pending.pop(p, None)
                if inv is None or inv[3] != f:
                    if inv is not None:
                        pending[p] = inv
                    if f != NOTICE or p not in aside:
                        raise pairing_error(d)
                    inv = aside.pop(p)
                if type_ == "info" and p != nemesis:
                    retired.add(p)
                inv_value = inv[4]
                if value is not None:
                    if inv_value is None:
                        inv_value = value
                    else:
                        inv_value.update(value)  # both dicts are fresh from the decoder: ours
                op = make(p, f, type_, inv[1], inv[2], index, time, inv_value, d.error)
                if f in client_fs:
                    check_value(op, src, inv[5])
                ops[inv[0]] = op
    for proc, (slot, index, time, f, value, line) in [*pending.items(), *aside.items()]:
        op = Op(proc, f, "info", index, time, None, None, value)
        check_value(op, src, line)
        ops[slot] = op
    log.debug("loaded %d ops from %s", len(ops), src)
    return ops  # type: ignore[return-value]  # every slot is filled by now


def write_events(path: Path, events: Iterable[Event]) -> int:
    """Write events as history.jsonl (one compact JSON object a line, the line record's
    encoding); returns how many."""
    n = 0
    with open(path, "wb") as fh:
        for e in events:
            fh.write(encode_line(e))
            n += 1
    return n
