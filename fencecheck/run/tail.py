"""Follows the workers' event logs while a run goes on: who holds which lock right now (for
holder-aware pauses), each worker's latest grant and its accepted writes (for a holder pause that
ends once its successor is seen), op counts for the progress line."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from fencecheck.workloads.base import WorkloadError
from fencecheck.workloads.eventlog import Event


@dataclass(slots=True)
class Holding:
    worker: str
    lock: str
    since_ns: int  # the grant's ok time (history clock)
    seen_at: float  # controller's time.monotonic() when the tailer saw it
    writes: int = 0  # accepted writes of this worker under this grant, as seen so far


@dataclass(slots=True)
class _File:
    path: Path
    worker: str
    offset: int = 0
    partial: bytes = b""
    # kept open between polls: the schedule polls every 5 ms, and opening each worker's log
    # each time was most of the controller's CPU while it waits (the logs are only appended to)
    fh: BinaryIO | None = None


@dataclass(slots=True)
class LogTailer:
    """Reads whatever complete lines were appended since the last `poll`."""

    files: list[_File] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    holding: dict[str, Holding] = field(default_factory=dict)  # worker -> its current grant
    # worker -> its latest grant, kept after its release: a successor whose whole section fell
    # between two polls is still seen
    latest: dict[str, Holding] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def follow(self, worker: str, path: Path) -> None:
        self.files.append(_File(path, worker))

    def poll(self) -> list[Holding]:
        """Read new lines; return the grants that appeared in this poll."""
        fresh: list[Holding] = []
        now = time.monotonic()
        for f in self.files:
            if f.fh is None:
                try:
                    f.fh = open(f.path, "rb")  # noqa: SIM115 (closed by close())
                except FileNotFoundError:
                    continue
                f.fh.seek(f.offset)
            data = f.fh.read()
            if not data:
                continue
            f.offset += len(data)
            data = f.partial + data
            lines = data.split(b"\n")
            f.partial = lines.pop()
            for line in lines:
                if not line.strip():
                    continue
                try:
                    ev = Event.from_json(json.loads(line))
                except (ValueError, WorkloadError):
                    continue  # the merge step reports malformed lines; progress just skips them
                fresh.extend(self._event(f.worker, ev, now))
        return fresh

    def close(self) -> None:
        for f in self.files:
            if f.fh is not None:
                f.fh.close()
                f.fh = None

    def _event(self, worker: str, ev: Event, now: float) -> list[Holding]:
        typ, f = ev.type, ev.f
        if typ != "invoke":
            self.counts[str(typ)] += 1
        value = ev.value if isinstance(ev.value, dict) else {}
        if f == "acquire" and typ == "ok":
            h = Holding(worker, str(value.get("lock")), ev.time, now)
            self.holding[worker] = h
            self.latest[worker] = h
            return [h]
        if f == "write" and typ == "ok":
            g = self.latest.get(worker)
            if g is not None and value.get("lock") == g.lock:
                g.writes += 1
        if (typ == "invoke" and f in ("release", "acquire")) or typ == "info":
            self.holding.pop(worker, None)
        return []

    @property
    def completed(self) -> int:
        return sum(self.counts.values())
