"""Merges the per-process event logs (workers, final read, nemesis) into `history.jsonl`.

Each log is in its writer's time order; the merge orders all events by time (the one monotonic
clock), keeping each file's own order on ties, and numbers them, each line written by the history
line record (fencecheck.records.history). A final partial line (a worker killed mid-write) is
dropped and logged, never guessed at.
"""

from __future__ import annotations

import heapq
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from fencecheck.records.history import Line, encode_line

log = logging.getLogger(__name__)



def _events(path: Path, rank: int) -> Iterator[tuple[int, int, int, dict[str, Any]]]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return
    lines = raw.split(b"\n")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            if n == len(lines) or (n == len(lines) - 1 and not lines[-1]):
                log.warning("%s:%d: dropped a partial last line", path, n)
                continue
            log.warning("%s:%d: dropped a line that is not JSON", path, n)
            continue
        if not isinstance(ev, dict) or not isinstance(ev.get("time"), int):
            log.warning("%s:%d: dropped an event without an integer time", path, n)
            continue
        yield ev["time"], rank, n, ev


def merge_logs(logs: Sequence[Path], out: Path) -> int:
    """Write the merged history to out (atomically); return the number of events."""
    streams = [_events(p, i) for i, p in enumerate(logs)]
    tmp = out.with_suffix(".tmp")
    count = 0
    with open(tmp, "wb") as fh:
        for _t, _r, _n, ev in heapq.merge(*streams, key=lambda e: (e[0], e[1], e[2])):
            # the logs' events as they are: the checker judges the history, the merge orders it
            get: Callable[[str], Any] = ev.get
            fh.write(encode_line(Line(count, ev["time"], get("process"), get("type"), get("f"),
                                      get("value"), get("error"))))
            count += 1
    tmp.replace(out)
    return count
