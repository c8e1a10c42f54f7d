"""A worker's event log: append-only JSONL, one event a line, written to the file per event
(one `write(2)` on an O_APPEND descriptor, no user-space buffer: a worker killed at any point
keeps every line it wrote).

The event is the record fencecheck.records.history owns (`Event`: `{"time": ns since t0,
"process", "type", "f", "value", "error"?}`, DESIGN.md's history format without `index`); every
line is written by its `encode_event`. Workers and the controller's nemesis log write it, the
progress tail and the merge read it; the controller merges all logs by time and indexes.
`read_log` reads one back, tolerating a torn last line from a worker killed mid-write.
`encode_line` is the same JSON line for any dict (the fenced store's protocol).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import msgspec

from fencecheck.records import history as history_record
from fencecheck.records.history import EVENT_TYPES as EVENT_TYPES
from fencecheck.records.history import EventType as EventType
from fencecheck.records.history import LineError, Notice, notice_lines
from fencecheck.workloads.base import WorkloadError
from fencecheck.workloads.evidence import EVIDENCE, stamped

log = logging.getLogger(__name__)

FIELDS = ("time", "process", "type", "f", "value")  # every event has these; `error` is optional


class Event(history_record.Event):
    """One operation event (the record, with errors as this package's). `process`: a worker's
    process id, or "nemesis"."""

    @classmethod
    def from_json(cls, data: object) -> Event:
        """The event in data; WorkloadError naming what is wrong if it is not one."""
        if not isinstance(data, dict):
            raise WorkloadError("event: not a JSON object")
        try:
            ev = history_record.event_from_builtins(data)
        except LineError as e:
            raise WorkloadError(f"event: {e.what}") from None
        return cls(ev.time, ev.process, ev.type, ev.f, ev.value, ev.error)


class EventLog:
    """Writes events of one worker. Times come from CLOCK_MONOTONIC, which network namespaces
    share, minus the controller's `t0_ns`, so logs of all workers merge on one time line."""

    def __init__(self, path: str | Path, t0_ns: int) -> None:
        self.path = Path(path)
        self.t0_ns = t0_ns
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._last = 0
        # a client's notices come from its library's threads (workloads/notices.py): stamping
        # and writing are one step, so the log stays in time order
        self._lock = threading.Lock()

    def now(self) -> int:
        return time.monotonic_ns() - self.t0_ns

    def write(
        self,
        process: int,
        type_: EventType,
        f: str,
        value: dict[str, Any] | None,
        error: str | None = None,
    ) -> int:
        """Append one event stamped now; returns its time. Times never decrease within a log."""
        with self._lock:
            # now() inlined: this runs twice per operation of every worker
            t = _monotonic_ns() - self.t0_ns
            if t < self._last:
                t = self._last
            self._last = t
            if value is not None and EVIDENCE in value:  # a library's evidence: its times too
                value = stamped(value, self.t0_ns)
            data = _encode_event(_Event(t, process, type_, f, value, error))
            written = os.write(self._fd, data)
            if written < len(data):  # a short write: hardly ever (a full disk, a signal)
                _write_all(self._fd, data[written:])
        return t

    def notice(self, process: int, notice: Notice) -> int:
        """Append a lost-lock notice stamped now (its invoke and ok, one write); its time."""
        with self._lock:
            t = max(_monotonic_ns() - self.t0_ns, self._last)
            self._last = t
            _write_all(self._fd, notice_lines(t, process, notice))
        return t

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_ENCODER = msgspec.json.Encoder()
_monotonic_ns = time.monotonic_ns
_Event = history_record.Event
_encode_event = history_record.encode_event


def encode_line(obj: dict[str, Any]) -> bytes:
    """One JSONL line. msgspec is ~5x faster than json.dumps here, and the worker writes every
    event; json.dumps remains for what msgspec refuses (NaN stays NaN, keys that are not
    strings), so a line means what it meant before."""
    try:
        line = _ENCODER.encode(obj)
    except (TypeError, msgspec.EncodeError):
        return json.dumps(obj).encode() + b"\n"
    if b"null" in line and _has_nonfinite(obj):
        return json.dumps(obj).encode() + b"\n"
    return line + b"\n"


def _has_nonfinite(value: Any) -> bool:
    if isinstance(value, float):
        return value != value or value in (float("inf"), float("-inf"))
    if isinstance(value, dict):
        return any(_has_nonfinite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_nonfinite(v) for v in value)
    return False


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def read_log(path: str | Path) -> list[dict[str, Any]]:
    """The events of one worker log. A torn (unterminated, unparsable) last line is dropped;
    a bad line anywhere else raises WorkloadError naming file and line."""
    text = Path(path).read_text(encoding="utf-8")
    lines = text.split("\n")
    events: list[dict[str, Any]] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError as e:
            if n == len(lines):  # the last line had no newline: torn by a kill
                log.warning("%s:%d: dropping a torn last line", path, n)
                break
            raise WorkloadError(f"{path}:{n}: not JSON: {e}") from e
        if not isinstance(event, dict):
            raise WorkloadError(f"{path}:{n}: not a JSON object")
        events.append(event)
    return events
