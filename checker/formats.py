"""History importers and the format guesser: Jepsen EDN, Jepsen log lines, our history.jsonl and
the same events as one JSON document.

- `load_any(path, fmt)`: read a history file in any supported format and pair it into `Op`s.
- `read_events(path, fmt)`: its events, unpaired.
- `guess_format(path)`: "jsonl", "json", "edn" or "jepsen-log", from the content.

The readers of each foreign format are their own modules: `checker.edn` (the EDN reader),
`checker.jepsen` (Jepsen ops, from EDN or log lines, as our events; its docstring has the table
of how they map) and `checker.jsondoc` (history.jsonl's events as one JSON document).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from fencecheck.checker.base import Event, HistoryError, Op
from fencecheck.checker.history import load_lines, load_ops, pair
from fencecheck.checker.jepsen import (
    iter_edn_events,
    iter_jepsen_log_events,
    read_edn_events,
    read_jepsen_log_events,
)
from fencecheck.checker.jsondoc import iter_json_lines

FORMATS: Final = ("jsonl", "json", "edn", "jepsen-log")
# a JSON object with a string key, or an array of them (or an empty one), where EDN has keywords
_JSON_START: Final = re.compile(r'(\[[ \t\n\r]*)?\{[ \t\n\r]*"|\[[ \t\n\r]*\]')


def _is_json_document(head: str, first: str) -> bool:
    """Whether a file starting with `head` (`first` its first line with content) is one JSON
    document rather than JSON lines or EDN: an array of objects, or an object that does not end
    on its first line (`jq .`)."""
    if _JSON_START.match(head) is None:
        return False
    if first.startswith("["):
        return True
    try:
        return not isinstance(json.loads(first), dict)
    except ValueError:
        return True  # an object that goes on past its first line


def guess_format(path: Path) -> str:
    """"jsonl", "json", "edn" or "jepsen-log", from the first lines; HistoryError if none
    fits."""
    seen = False
    with open(path, encoding="utf-8") as fh:
        for lineno, raw in enumerate(fh, 1):
            line = raw.strip()
            if not line or line.startswith(";"):
                continue
            seen = True
            if "jepsen.util" in line:
                return "jepsen-log"
            if line.startswith('{"'):
                return "jsonl"
            if line.startswith(("[", "{")):
                if _is_json_document(line + "\n" + fh.read(4096), line):
                    return "json"
                return "jsonl" if _JSON_START.match(line) else "edn"  # `{ "index": 0, ...}`
            if lineno >= 50:
                break
        else:
            if not seen:
                return "jsonl"  # nothing but blank or comment lines: an empty history
    raise HistoryError(str(path), 1, "cannot tell the format (history.jsonl, Jepsen EDN or "
                                     "Jepsen log lines); name it explicitly")


def read_events(path: Path, fmt: str | None = None) -> list[Event]:
    """The events of a history file in `fmt` (guessed when None)."""
    fmt = fmt or guess_format(path)
    if fmt == "edn":
        return read_edn_events(path)
    if fmt == "jepsen-log":
        return read_jepsen_log_events(path)
    if fmt == "jsonl":
        from fencecheck.checker.history import read_events as read_jsonl

        return list(read_jsonl(path))
    if fmt == "json":
        return [d for _, d in iter_json_lines(path)]  # each line is the event record
    raise HistoryError(str(path), 0, f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")


def load_any(path: Path | str, fmt: str | None = None) -> list[Op]:
    """Read and pair a history in any supported format; `fmt` None guesses from the content.
    Raises HistoryError on anything malformed (a missing file too, as line 0)."""
    path = Path(path)
    if not path.is_file():
        raise HistoryError(str(path), 0, "no such file")
    fmt = fmt or guess_format(path)
    if fmt == "jsonl":
        return load_ops(path)
    if fmt == "json":
        return load_lines(iter_json_lines(path), str(path))
    # Paired as they are read, so that no list of events stands beside the ops (memory stays
    # within a few times the input); a history out of index order is read again and sorted.
    stream = iter_edn_events(path) if fmt == "edn" else iter_jepsen_log_events(path) \
        if fmt == "jepsen-log" else None
    if stream is None:
        raise HistoryError(str(path), 0, f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")
    try:
        return pair(_in_index_order(stream), str(path))
    except (_OutOfOrder, HistoryError):
        pass  # out of order (a pairing error may show it first): judged in index order below
    events = read_events(path, fmt)
    events.sort(key=lambda e: e.index)
    return pair(events, str(path))


class _OutOfOrder(Exception):
    pass


def _in_index_order(events: Iterator[Event]) -> Iterator[Event]:
    last = -1
    for e in events:
        if e.index < last:
            raise _OutOfOrder
        last = e.index
        yield e
