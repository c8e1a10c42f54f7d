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

The handles `op()` and `fault()` return are in `fencecheck.api.ops`; the fields and values the
recorder accepts, its error and its JSON encoder in `fencecheck.api.values`.
"""

from __future__ import annotations

import difflib
import heapq
import os
import secrets
import shutil
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

from fencecheck.api.ops import FaultWindow, OpContext
from fencecheck.api.values import (
    _REQUIRED,
    CLIENT_FS,
    ClientF,
    RecorderError,
    _an,
    _check_fields,
    _encode,
    _process_json,
)
from fencecheck.records.history import NOTICE

_live: weakref.WeakSet[HistoryRecorder] = weakref.WeakSet()



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

    def notice(self, process: int, /, lock: str, token: int | None = None,
               reason: str = "") -> None:
        """Record that the lock library told `process` its lock `lock` (the grant of `token`)
        is lost or in doubt (client-go's OnStoppedLeading, a SUSPENDED or LOST connection, a
        failed renewal's callback): an invoke and an ok at one instant, allowed while an op of
        the process is in flight (call it from the library's callback). Writes the process
        makes after it are `write-after-notice` violations (DESIGN.md)."""
        if type(process) is not int or process < 0:
            raise RecorderError(f"process must be a non-negative integer, not {process!r}")
        value = {"lock": lock, "token": token, "reason": reason}
        _check_fields(process, NOTICE, value, "notice")
        tail = f'"f":"{NOTICE}","value":{_encode(value)}}}\n'
        with self._lock:
            self._check_open()
            if process in self._retired:
                raise RecorderError(f"process {process} was retired by an info completion: "
                                    "go on under a new process id")
            head = f'{{"time":{time.monotonic_ns() - self._t0_ns},"process":{process},"type":'
            self._write(f'{head}"invoke",{tail}{head}"ok",{tail}')

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


