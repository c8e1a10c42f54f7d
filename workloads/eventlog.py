"""A worker's event log: append-only JSONL, one event a line, flushed per event.

Each line is `{"time": ns since t0, "process", "type", "f", "value", "error"?}` (DESIGN.md's
history format without `index`; the controller merges all workers' logs by time and indexes).
`read_log` reads one back, tolerating a torn last line from a worker killed mid-write.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import IO, Any, Literal

from fencecheck.workloads.base import WorkloadError

log = logging.getLogger(__name__)

EventType = Literal["invoke", "ok", "fail", "info"]


class EventLog:
    """Writes events of one worker. Times come from CLOCK_MONOTONIC, which network namespaces
    share, minus the controller's `t0_ns`, so logs of all workers merge on one time line."""

    def __init__(self, path: str | Path, t0_ns: int) -> None:
        self.path = Path(path)
        self.t0_ns = t0_ns
        self._file: IO[str] = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        self._last = 0

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
        t = max(self.now(), self._last)
        self._last = t
        event: dict[str, Any] = {"time": t, "process": process, "type": type_, "f": f,
                                 "value": value}
        if error is not None:
            event["error"] = error
        self._file.write(json.dumps(event) + "\n")
        self._file.flush()
        return t

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
