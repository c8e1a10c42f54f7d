"""`HistoryRecorder`: record a user's own lock and resource operations as a fencecheck history.

Any code (threads, asyncio tasks, OS processes) wraps its operations in `rec.op(...)`; the
recorder stamps every event from one clock (`time.monotonic_ns()`, system-wide on Linux, so OS
processes on one host share it) and writes the lines the checker's strict reader accepts
(DESIGN.md, "History format"):

    with HistoryRecorder("history.jsonl") as rec:
        with rec.op(1, "acquire", lock="orders", lease_ms=5000) as op:
            token = my_lock.acquire()
            op.ok(token=token)
        ...

An op whose block raises is recorded as `info` (its outcome is unknown) and the exception goes
on; a block that ends without `op.ok()` or `op.fail()` is `info` too. After `info` the process id
is retired: go on under a new id.

Mistakes are refused where they are made, as RecorderError, before anything is written: a field
the op does not have (`lease=`, `tokn=`: the message names the closest known field), a value the
checks cannot use (`lease_ms=-5`, a token that is not an integer; checker.reader's table), an
acquire without its lock, `op.ok()` outside its `with` block, and a value that is not JSON (NaN,
an object).

How lines get to one file from many writers: each OS process appends to a part file of its own
(`<path>.parts/<pid>-<nonce>.jsonl`, one `os.write` per event on an O_APPEND descriptor, so a
crash keeps every event recorded so far), stamping and writing under a per-process lock so that
each part is in time order. `close()` in the process that created the recorder merges the parts
by time (a streaming `heapq.merge`) into `path` and assigns `index`. Child processes (fork, or
spawn: the recorder pickles) must be finished before that `close()`.
"""

from __future__ import annotations

import difflib
import heapq
import json
import math
import os
import secrets
import shutil
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, Self

from fencecheck.checker.reader import VALUES

ClientF = Literal["acquire", "renew", "release", "read", "write"]
CLIENT_FS: frozenset[str] = frozenset(("acquire", "renew", "release", "read", "write"))
_MAX_ERROR = 200  # an exception's text in the history: enough to recognise it, not a traceback

_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, check_circular=False)
_c_encode = json.encoder.c_make_encoder  # type: ignore[attr-defined]


def _make_encode() -> Callable[[Any], str]:
    """JSON text of a value, compact; the C encoder called directly (it is most of an op's
    recording cost, and `JSONEncoder.encode` adds a third on top of it)."""
    if _c_encode is None:
        return _encoder.encode
    chunks = _c_encode(None, _encoder.default, json.encoder.encode_basestring, None, ":", ",",
                       False, False, False)  # allow_nan=False: NaN is not JSON

    def encode(value: Any) -> str:
        return "".join(chunks(value, 0))

    return encode


_json_encode = _make_encode()


def _encode(value: Any) -> str:
    """JSON text of a value, or RecorderError saying why it has none."""
    try:
        return _json_encode(value)
    except ValueError as e:  # NaN or an infinity (allow_nan=False), or a circular value
        raise RecorderError(f"not JSON: {e} ({_nonfinite(value) or 'a circular value'})") \
            from None
    except TypeError as e:
        raise RecorderError(f"not JSON: {e}") from None
    except RecursionError:
        raise RecorderError("not JSON: nested too deeply") from None


def _nonfinite(value: Any) -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        for k, x in value.items():
            if (what := _nonfinite(x)) is not None:
                return f"{k}={what}"
    if isinstance(value, list | tuple):
        for x in value:
            if (what := _nonfinite(x)) is not None:
                return what
    return None


# f -> field -> (what it must be, its test) from the checker's table; reads and writes carry the
# resource's own `value` too (any JSON)
_ANY: Final = ("any JSON value", lambda _x: True)
FIELDS: Final[dict[str, dict[str, tuple[str, Callable[[Any], bool]]]]] = {
    f: {**{name: (kind[0], kind[1]) for name, (kind, _) in spec.items()},
        **({"value": _ANY} if f in ("read", "write") else {})}
    for f, spec in VALUES.items()
}
_TESTS: Final = {f: {name: test for name, (_, test) in spec.items()} for f, spec in FIELDS.items()}
_REQUIRED: Final = {f: tuple(n for n, (_, req) in spec.items() if req == "always")
                    for f, spec in VALUES.items()}
_REQUIRED_OK: Final = {f: tuple(n for n, (_, req) in spec.items() if req == "ok")
                       for f, spec in VALUES.items()}


def _check_fields(process: int, f: str, value: dict[str, Any], where: str) -> None:
    """RecorderError for a field `f` does not have, or a value its check cannot use."""
    tests = _TESTS[f]
    if value.keys() <= tests.keys():  # the usual case, in as few steps as it can be
        for name, x in value.items():
            if not tests[name](x):
                break
        else:
            return
    fields = FIELDS[f]
    for name, x in value.items():
        spec = fields.get(name)
        if spec is None:
            close = difflib.get_close_matches(name, fields, n=1, cutoff=0.5)
            hint = f" (did you mean {close[0]}=?)" if close else ""
            raise RecorderError(f"process {process}: {f} {where}: unknown field {name}={hint}; "
                                f"{_an(f)} has {', '.join(fields)}")
        if not spec[1](x):
            raise RecorderError(f"process {process}: {f} {where}: {name} must be {spec[0]}, "
                                f"not {x!r}")


def _an(f: str) -> str:
    return f"an {f}" if f[0] in "aeiou" else f"a {f}"


_live: weakref.WeakSet[HistoryRecorder] = weakref.WeakSet()


class RecorderError(ValueError):
    """A misuse of the recorder: an op on a busy or retired process, an op completed twice, a
    bad process id or op name, or recording after close()."""


def _after_fork_in_child() -> None:
    # The child must not write into its parent's part file, nor wait on a lock a parent thread
    # held at the fork; its ops start from a clean slate.
    for rec in list(_live):
        rec._reset_for_child()


os.register_at_fork(after_in_child=_after_fork_in_child)


class HistoryRecorder:
    """Writes a fencecheck history (history.jsonl) of operations recorded with `op()`.

    Thread-, asyncio- and process-safe. Use it as a context manager, or call `close()`: the
    history file at `path` exists, complete and indexed, once the recorder is closed.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.parts_dir = self.path.with_name(self.path.name + ".parts")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.parts_dir.is_dir() and any(self.parts_dir.glob("*.jsonl")):
            # Their times count from another recorder's start: merged with ours they would lie.
            raise RecorderError(f"{self.parts_dir}: parts of a recording that was never closed "
                                "(in use, or its process died): merge them with "
                                "fencecheck.api.recorder.merge_parts, or remove them")
        self.parts_dir.mkdir(exist_ok=True)
        self._owner_pid = os.getpid()
        self._t0_ns = time.monotonic_ns()
        self._closed = False
        self._init_process_state()
        _live.add(self)

    def _init_process_state(self) -> None:
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._busy: set[int | str] = set()
        self._retired: set[int] = set()

    def _reset_for_child(self) -> None:
        self._init_process_state()

    # -- pickling for multiprocessing's spawn/forkserver: the child gets its own part file ------
    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "parts_dir": self.parts_dir, "owner_pid": self._owner_pid,
                "t0_ns": self._t0_ns, "closed": self._closed}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = state["path"]
        self.parts_dir = state["parts_dir"]
        self._owner_pid = state["owner_pid"]
        self._t0_ns = state["t0_ns"]
        self._closed = state["closed"]
        self._init_process_state()
        _live.add(self)

    # -- recording -------------------------------------------------------------------------------
    def op(self, process: int, f: ClientF, /, **value: Any) -> OpContext:
        """Record one client operation around a `with` block. `value` is the invoke's value
        (`lock`, `lease_ms`, `token`, `key`, `value` as DESIGN.md names them); complete it with
        `op.ok(**more)` or `op.fail(error=...)`. Raises RecorderError if `process` already has
        an op in flight in this OS process, or was retired by an `info`."""
        if type(process) is not int or process < 0:
            raise RecorderError(f"process must be a non-negative integer, not {process!r}")
        if f not in CLIENT_FS:
            close = difflib.get_close_matches(str(f), CLIENT_FS, n=1, cutoff=0.5)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise RecorderError(f"f must be one of {', '.join(sorted(CLIENT_FS))}, not "
                                f"{f!r}{hint}")
        _check_fields(process, f, value, "invoke")
        for name in _REQUIRED[f]:
            if name not in value:
                raise RecorderError(f"process {process}: {_an(f)} needs {name}=")
        return OpContext(self, process, f, _encode(value) if value else "null", value)

    def now_ns(self) -> int:
        """The recorder's clock: ns since it started, as the history's `time`. For an acquire
        that retries inside one op, pass `attempt_ns=rec.now_ns()` taken as the winning attempt
        was sent to `op.ok(...)`: the lease then counts from that attempt (DESIGN.md)."""
        return time.monotonic_ns() - self._t0_ns

    def fault(self, f: str, /, **value: Any) -> FaultWindow:
        """Record a fault the test injects (a pause, a partition) around a `with` block, as the
        nemesis does: `start-<f>` on entry with `value`, `stop-<f>` on exit. The checker's
        incidents name the fault window that overlapped a stale grant."""
        if not f or not isinstance(f, str):
            raise RecorderError(f"a fault needs a name, not {f!r}")
        return FaultWindow(self, f, _encode(value) if value else "null")

    def _begin(self, process: int | str, f: str, value_json: str) -> None:
        line_head = f',"process":{_process_json(process)},"type":"invoke","f":"{f}","value":'
        with self._lock:
            self._check_open()
            if process in self._busy:
                raise RecorderError(f"process {process} starts {f} while an op of its own is "
                                    "in flight (one op at a time per process)")
            if process in self._retired:
                raise RecorderError(f"process {process} was retired by an info completion: "
                                    "go on under a new process id")
            self._busy.add(process)
            self._write(f'{{"time":{time.monotonic_ns() - self._t0_ns}'
                        f"{line_head}{value_json}}}\n")

    def _end(self, process: int | str, f: str, type_: str, value_json: str,
             error: str | None) -> None:
        tail = "" if error is None else f',"error":{_encode(error)}'
        body = (f',"process":{_process_json(process)},"type":"{type_}","f":"{f}",'
                f'"value":{value_json}{tail}}}\n')
        with self._lock:
            self._check_open()
            self._busy.discard(process)
            if type_ == "info" and isinstance(process, int):
                self._retired.add(process)
            self._write(f'{{"time":{time.monotonic_ns() - self._t0_ns}{body}')

    def _nemesis(self, f: str, value_json: str) -> None:
        """A nemesis op as invoke + ok at one instant (so concurrent faults never overlap)."""
        with self._lock:
            self._check_open()
            now = time.monotonic_ns() - self._t0_ns
            self._write(f'{{"time":{now},"process":"nemesis","type":"invoke","f":"{f}",'
                        f'"value":{value_json}}}\n'
                        f'{{"time":{now},"process":"nemesis","type":"ok","f":"{f}",'
                        f'"value":null}}\n')

    def _check_open(self) -> None:
        if self._closed:
            raise RecorderError(f"{self.path}: the recorder is closed")

    def _write(self, text: str) -> None:
        """Called with the lock held: one O_APPEND write per event, straight to the kernel."""
        if self._fd is None:
            name = f"{os.getpid()}-{secrets.token_hex(4)}.jsonl"
            self._fd = os.open(self.parts_dir / name,
                               os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        data = text.encode()
        written = os.write(self._fd, data)
        while written < len(data):  # rare on a regular file (disk full, a signal): finish it
            written += os.write(self._fd, data[written:])

    # -- closing ---------------------------------------------------------------------------------
    def close(self) -> Path:
        """Finish recording. In the creating process: merge every part into `path` (by time,
        `index` 0, 1, 2, ...) and return it; in a child process: only stop writing. Ops still in
        flight stay open in the history (the checker counts them as info). Idempotent."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            if os.getpid() != self._owner_pid or self._closed:
                return self.path
            self._closed = True
        merge_parts(self.parts_dir, self.path)
        shutil.rmtree(self.parts_dir, ignore_errors=True)
        return self.path

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"HistoryRecorder({str(self.path)!r})"


def _process_json(process: int | str) -> str:
    return str(process) if type(process) is int else _encode(process)


def _time_of(line: str) -> int:
    # Parts are written by _write as '{"time":N,...': no need to parse the whole line.
    return int(line[8:line.index(",", 8)])


def _lines(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.endswith("\n"):  # a writer killed mid-line leaves a torn last line: drop it
                yield line


def merge_parts(parts_dir: Path, out: Path) -> int:
    """Merge the part files of `parts_dir` (each in time order) into the history `out`, in
    time order, each line given its `index`. Returns the number of events."""
    parts = sorted(parts_dir.glob("*.jsonl"))
    tmp = out.with_name(out.name + ".tmp")
    n = 0
    with open(tmp, "w", encoding="utf-8") as fh:
        for line in heapq.merge(*(_lines(p) for p in parts), key=_time_of):
            fh.write(f'{{"index":{n},{line[1:]}')
            n += 1
    os.replace(tmp, out)
    return n


class OpContext:
    """One client operation in flight: `ok(**value)`, `fail(error=..., **value)` or
    `info(error=..., **value)` completes it; leaving the block without one records `info`."""

    __slots__ = ("_entered", "_rec", "_value", "_value_json", "f", "process", "type")

    def __init__(self, rec: HistoryRecorder, process: int, f: str, value_json: str,
                 value: dict[str, Any]) -> None:
        self._rec = rec
        self.process = process
        self.f = f
        self._value_json = value_json
        self._value = value  # the invoke's, for the fields an ok must have somewhere
        self._entered = False
        self.type: Literal["ok", "fail", "info"] | None = None  # set once completed

    def __enter__(self) -> Self:
        if self._entered:
            raise RecorderError(f"process {self.process}: this {self.f} was entered already "
                                "(one `with rec.op(...)` per op)")
        self._rec._begin(self.process, self.f, self._value_json)
        self._entered = True
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 _tb: TracebackType | None) -> None:
        if self.type is not None:
            return
        if exc is None:
            self._complete("info", "no outcome recorded (neither ok() nor fail() was called)", {})
        else:
            text = str(exc).splitlines()[0] if str(exc) else ""
            error = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
            self._complete("info", error[:_MAX_ERROR], {})

    async def __aenter__(self) -> Self:
        return self.__enter__()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.__exit__(exc_type, exc, tb)

    def ok(self, **value: Any) -> None:
        """It happened; `value` adds to the invoke's (`token` of an acquire, `value` of a read)."""
        self._complete("ok", None, value)

    def fail(self, error: str | None = None, **value: Any) -> None:
        """It surely did not happen (a refusal; `error="stale-token"` for a fence's rejection)."""
        self._complete("fail", error, value)

    def info(self, error: str | None = None, **value: Any) -> None:
        """Its outcome is unknown (a timeout). Retires the process id."""
        self._complete("info", error, value)

    def _complete(self, type_: Literal["ok", "fail", "info"], error: str | None,
                  value: dict[str, Any]) -> None:
        if self.type is not None:
            raise RecorderError(f"process {self.process}: {self.f} already completed "
                                f"{self.type}")
        if not self._entered:
            raise RecorderError(f"process {self.process}: {type_}() outside the `with "
                                f"rec.op(...)` block of its {self.f} (it was never invoked)")
        if error is not None and type(error) is not str:
            raise RecorderError(f"process {self.process}: {self.f} {type_}: error must be a "
                                f"string, not {error!r}")
        if value:
            _check_fields(self.process, self.f, value, type_)
        if type_ == "ok" and _REQUIRED_OK[self.f]:
            for name in _REQUIRED_OK[self.f]:
                if name not in value and name not in self._value:
                    raise RecorderError(f"process {self.process}: an ok {self.f} needs {name}= "
                                        "(in the op or in ok())")
        self._rec._end(self.process, self.f, type_, _encode(value) if value else "null", error)
        self.type = type_


class FaultWindow:
    """A fault window: `start-<f>` when the block starts, `stop-<f>` when it ends."""

    __slots__ = ("_rec", "_value_json", "f")

    def __init__(self, rec: HistoryRecorder, f: str, value_json: str) -> None:
        self._rec = rec
        self.f = f
        self._value_json = value_json

    def __enter__(self) -> Self:
        self._rec._nemesis(f"start-{self.f}", self._value_json)
        return self

    def __exit__(self, *_exc: object) -> None:
        self._rec._nemesis(f"stop-{self.f}", "null")

    async def __aenter__(self) -> Self:
        return self.__enter__()

    async def __aexit__(self, *_exc: object) -> None:
        self.__exit__()
