"""History events as one JSON document (format "json"): `iter_json_lines(path)` reads
history.jsonl's events as a JSON array (`jq -s`), or pretty-printed one after another (`jq .`),
each with the line where it starts; a key twice in one object is bad input, as in history.jsonl.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from fencecheck.checker.base import HistoryError
from fencecheck.checker.reader import (
    STRICT_JSON,
    Line,
    RepeatedKey,
    line_from_dict,
    repeated_message,
)

_WS: Final = re.compile(r"[ \t\n\r]*")


class _Scanner:
    """Positions in a JSON text, with the line of each (counted once, as the scan goes on)."""

    def __init__(self, text: str, src: str) -> None:
        self.text, self.src = text, src
        self.pos = 0
        self._line, self._counted = 1, 0

    def line(self, pos: int) -> int:
        if pos >= self._counted:
            self._line += self.text.count("\n", self._counted, pos)
            self._counted = pos
        return self._line

    def skip_space(self) -> str:
        """The character after the whitespace at pos ("" at the end), pos moved to it."""
        m = _WS.match(self.text, self.pos)
        if m is not None:
            self.pos = m.end()
        return self.text[self.pos:self.pos + 1]

    def value(self) -> tuple[int, Any]:
        start = self.pos
        try:
            v, self.pos = STRICT_JSON.raw_decode(self.text, start)
        except RepeatedKey as e:
            raise HistoryError(self.src, self.line(start), repeated_message(e.key)) from None
        except json.JSONDecodeError as e:
            raise HistoryError(self.src, e.lineno, f"not valid JSON: {e.msg} (column "
                                                   f"{e.colno})") from None
        except RecursionError:
            raise HistoryError(self.src, self.line(start), "nested too deeply") from None
        return self.line(start), v


def _json_values(text: str, src: str) -> Iterator[tuple[int, Any]]:
    """The JSON values of `text` one after another, a top-level array opened into its items,
    each with the line where it starts."""
    s = _Scanner(text, src)
    while (c := s.skip_space()) != "":
        if c != "[":
            yield s.value()
            continue
        s.pos += 1
        if s.skip_space() == "]":
            s.pos += 1
            continue
        while True:
            yield s.value()
            c = s.skip_space()
            if c not in (",", "]"):
                raise HistoryError(src, s.line(s.pos), "not valid JSON: expected ',' or ']' "
                                                       "after an array item")
            s.pos += 1
            if c == "]":
                break
            s.skip_space()


def iter_json_lines(path: Path) -> Iterator[tuple[int, Line]]:
    """The events of a JSON history document (see the module's docstring) as history lines,
    each with the line of the file where it starts."""
    src = str(path)
    for lineno, v in _json_values(path.read_text(encoding="utf-8"), src):
        yield lineno, line_from_dict(v, src, lineno)
