"""History importers: Jepsen EDN, Jepsen log lines, our history.jsonl and the same events as one
JSON document, plus a format guesser.

- `load_any(path, fmt)`: read a history file in any supported format and pair it into `Op`s.
- `read_edn_events(path)`, `read_jepsen_log_events(path)`: Jepsen histories as our `Event`s.
- `iter_json_lines(path)`: "json", history.jsonl's events as a JSON array (`jq -s`), or
  pretty-printed one after another (`jq .`), each with the line where it starts; a key twice in
  one object is bad input, as in history.jsonl.
- `guess_format(path)`: "jsonl", "json", "edn" or "jepsen-log", from the content.

How Jepsen ops become our events (the `value` dict the models read):
| Jepsen | ours |
|---|---|
| `:process 3`, `:process :nemesis` | `process` 3, `"nemesis"` |
| `:f :read` / `:write`, `:value v` | `{"value": v}` (v nil -> None; vectors -> lists) |
| `:f :cas`, `:value [a b]` | `{"from": a, "to": b}` |
| `:f :acquire` / `:release` / `:renew`, `:value nil` | `{"lock": "lock"}` |
| the same with `:value v` | `{"lock": "lock", "value": v}` |
| any other f, `:value v` | `{"value": v}` |
| `:error e` | `error` = e's text (`:not-held` -> "not-held") |
| `:fail`/`:info` with a bare keyword value (`:timed-out`) | `error` = it; value = the invoke's |
| `:time t`, `:index i` | `time`, `index`; missing -> the event's position in the file |
Jepsen logs a nemesis op as two `:info` events; the first becomes the invoke. Keys of independent
(multi-key) histories are not split out. The EDN reader covers what Jepsen histories use: maps,
vectors, lists, sets, keywords, strings, numbers, nil, booleans, comments, `#_`, tags (dropped).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, Literal, cast

from fencecheck.checker.base import NEMESIS, Event, EventType, HistoryError, Op
from fencecheck.checker.history import load_lines, load_ops, pair
from fencecheck.checker.reader import (
    STRICT_JSON,
    Line,
    RepeatedKey,
    line_from_dict,
    repeated_message,
)

FORMATS: Final = ("jsonl", "json", "edn", "jepsen-log")
_LOCK_FS: Final = frozenset(("acquire", "release", "renew"))


# --- EDN reader ------------------------------------------------------------------------------


class Keyword(str):
    """An EDN keyword's name: `:invoke` reads as Keyword("invoke")."""

    __slots__ = ()


class _EdnError(ValueError):
    def __init__(self, line: int, what: str) -> None:
        super().__init__(what)
        self.line = line


_TOKEN: Final = re.compile(
    # strings are scanned by _EdnReader.string: a regex over a long string keeps a backtracking
    # frame per character (~200 bytes of memory per byte of input)
    r"""(?P<ws>[\s,]+) | (?P<comment>;[^\n]*) | (?P<quote>")
      | (?P<open>\#\{|[\[{(]) | (?P<close>[\]})]) | (?P<disc>\#_)
      | (?P<tag>\#[^\s,\[\]{}()";]+) | (?P<atom>[^\s,\[\]{}()";]+)""",
    re.VERBOSE,
)
_INT: Final = re.compile(r"[+-]?\d+N?")
_FLOAT: Final = re.compile(r"[+-]?\d+(\.\d*)?([eE][+-]?\d+)?M?")
_CLOSERS: Final = {"[": "]", "(": ")", "{": "}", "#{": "}"}
_ESCAPES: Final = {"n": "\n", "t": "\t", "r": "\r"}
_END: Final = object()  # a closing bracket (or the end of input) where a form could start


_KEYWORDS: dict[str, Keyword] = {}  # one object per keyword name: a history repeats a few


def _atom(text: str) -> Any:
    if text.startswith(":"):
        kw = _KEYWORDS.get(text)
        if kw is None:
            kw = Keyword(text[1:])
            if len(_KEYWORDS) < 10_000:
                _KEYWORDS[text] = kw
        return kw
    if text in ("nil", "true", "false"):
        return {"nil": None, "true": True, "false": False}[text]
    if _INT.fullmatch(text):
        return int(text.rstrip("N"))
    if _FLOAT.fullmatch(text):
        return float(text.rstrip("M"))
    return text  # a symbol: keep its name


def _frozen(v: Any) -> Any:
    """Map keys and set members must be hashable."""
    if isinstance(v, list):
        return tuple(_frozen(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted(((_frozen(k), _frozen(x)) for k, x in v.items()), key=repr))
    return v


class _EdnReader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.line = 1

    def skip_space(self) -> None:
        while (m := _TOKEN.match(self.text, self.pos)) and m.lastgroup in ("ws", "comment"):
            self.line += m.group().count("\n")
            self.pos = m.end()

    def token(self) -> tuple[str, str]:
        self.skip_space()
        m = _TOKEN.match(self.text, self.pos)
        if m is None:
            return "eof", ""
        if m.lastgroup == "quote":
            return "string", self.string()
        self.pos = m.end()
        self.line += m.group().count("\n")
        return m.lastgroup or "", m.group()

    def string(self) -> str:
        """The string literal at pos, quotes included, found by searching for an unescaped
        closing quote (linear time, no memory beyond the result)."""
        text, start = self.text, self.pos
        i = start + 1
        while True:
            j = text.find('"', i)
            if j < 0:
                raise _EdnError(self.line, "a string that is never closed")
            k = j
            while text[k - 1] == "\\":
                k -= 1
            if (j - k) % 2 == 0:  # an even run of backslashes escapes only itself
                break
            i = j + 1
        self.pos = j + 1
        self.line += text.count("\n", start, j)
        return text[start:j + 1]

    def form(self, closer: str | None, opened: int = 0) -> Any:
        """The next form, or _END at `closer` (or at the end of input when closer is None);
        `opened` is the line of the bracket that `closer` closes, for the error."""
        kind, tok = self.token()
        if kind == "eof":
            if closer is not None:
                raise _EdnError(opened or self.line, f"the {closer!r} that closes the form "
                                                     f"opened here is missing")
            return _END
        if kind == "close":
            if tok != closer:
                raise _EdnError(self.line, f"unexpected {tok!r}")
            return _END
        if kind == "string":
            return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m[1], m[1]), tok[1:-1])
        if kind == "atom":
            return _atom(tok)
        if kind in ("disc", "tag"):
            v = self.form(closer, opened)
            if v is _END:
                raise _EdnError(self.line, f"{tok} is not followed by a form")
            return self.form(closer, opened) if kind == "disc" else v
        items = []
        line = self.line
        while (v := self.form(_CLOSERS[tok], line)) is not _END:
            items.append(v)
        if tok == "{":
            if len(items) % 2:
                raise _EdnError(self.line, "a map with an odd number of forms")
            return {_frozen(items[i]): items[i + 1] for i in range(0, len(items), 2)}
        return frozenset(_frozen(x) for x in items) if tok == "#{" else items


def read_edn(text: str) -> Iterator[tuple[int, Any]]:
    """The top-level forms of `text` with their first line; a vector or list at the top level (a
    whole Jepsen history) is opened, so each op comes with its own line."""
    r = _EdnReader(text)
    while True:
        r.skip_space()
        line = r.line
        if text.startswith(("[", "("), r.pos):
            closer = _CLOSERS[r.token()[1]]
            opened = r.line
            while True:
                r.skip_space()
                line = r.line
                v = r.form(closer, opened)
                if v is _END:
                    break
                yield line, v
            continue
        v = r.form(None)
        if v is _END:
            return
        yield line, v


def _read_value(text: str) -> Any:
    """One EDN form; text that is not exactly one form (a nemesis message) stays text."""
    r = _EdnReader(text)
    try:
        v = r.form(None)
        r.skip_space()
    except _EdnError:
        return text
    return text if v is _END or r.pos < len(text) else v


# --- Jepsen ops -> events --------------------------------------------------------------------


def _name(v: Any) -> str:
    return str(v) if isinstance(v, str) else repr(v)


def _jsonable(v: Any) -> Any:
    """EDN sets and non-string map keys have no JSON form: sets become lists, keys text."""
    if isinstance(v, frozenset | list | tuple):
        items = [_jsonable(x) for x in v]
        return sorted(items, key=repr) if isinstance(v, frozenset) else items
    if isinstance(v, dict):
        return {k if isinstance(k, str) else repr(k): _jsonable(x) for k, x in v.items()}
    return v


def _value(f: str, v: Any) -> dict[str, Any]:
    v = _jsonable(v)
    if f == "cas" and isinstance(v, list) and len(v) == 2:
        return {"from": v[0], "to": v[1]}
    if f in _LOCK_FS:
        return {"lock": "lock"} if v is None else {"lock": "lock", "value": v}
    return {"value": v}


class _Converter:
    """Turns Jepsen op maps into Events, in file order."""

    def __init__(self, src: str) -> None:
        self.src = src
        self.count = 0  # events so far: the default index and time
        self.nemesis_open = False

    def add(self, line: int, process: Any, type_: Any, f: Any, value: Any, error: Any = None,
            time: Any = None, index: Any = None) -> Event:
        where = self.count
        self.count += 1
        if process == NEMESIS and isinstance(process, Keyword):
            p: int | Literal["nemesis"] = NEMESIS
        elif isinstance(process, int) and not isinstance(process, bool):
            p = process
        else:
            raise HistoryError(self.src, line, f":process must be an integer or :nemesis, "
                                               f"not {process!r}")
        if type_ not in ("invoke", "ok", "fail", "info"):
            raise HistoryError(self.src, line, f":type must be :invoke, :ok, :fail or :info, "
                                               f"not {type_!r}")
        if f is None:
            raise HistoryError(self.src, line, "the op has no :f")
        for name, x in (("time", time), ("index", index)):
            if x is not None and (not isinstance(x, int) or isinstance(x, bool) or x < 0):
                raise HistoryError(self.src, line, f":{name} must be a natural number, not {x!r}")
        fname = _name(f)
        kind = cast(EventType, str(type_))
        if p == NEMESIS and kind == "info":
            # Jepsen logs a nemesis op as info (start) then info (done).
            kind = "ok" if self.nemesis_open else "invoke"
            self.nemesis_open = not self.nemesis_open
        err = None if error is None else _name(error)
        if kind in ("fail", "info") and isinstance(value, Keyword):
            err, value = err or str(value), None
        val = None if (value is None and kind in ("fail", "info")) else _value(fname, value)
        return Event(where if index is None else index, where if time is None else time, p, kind,
                     fname, val, err)


def iter_edn_events(path: Path) -> Iterator[Event]:
    """A Jepsen EDN history (a whole-file vector, or one map a line) as Events."""
    src = str(path)
    conv = _Converter(src)
    try:
        for line, op in read_edn(path.read_text(encoding="utf-8")):
            if not isinstance(op, dict):
                raise HistoryError(src, line, f"expected an op map, found {type(op).__name__}")
            yield conv.add(line, op.get(Keyword("process")), op.get(Keyword("type")),
                     op.get(Keyword("f")), op.get(Keyword("value")), op.get(Keyword("error")),
                     op.get(Keyword("time")), op.get(Keyword("index")))
    except _EdnError as e:
        raise HistoryError(src, e.line, f"not valid EDN: {e}") from None


def read_edn_events(path: Path) -> list[Event]:
    """A Jepsen EDN history (a whole-file vector, or one map a line) as Events."""
    return list(iter_edn_events(path))


_LOG_LINE: Final = re.compile(
    # Tabs separate the fields, but some logs (Porcupine's etcd_100..102) have spaces instead.
    r"jepsen\.util\s*[-:]\s+(?P<p>:?[\w.-]+)\s+:(?P<type>\w+)\s+:?(?P<f>\S+)(?:\s+(?P<v>.*))?$"
)


def iter_jepsen_log_events(path: Path) -> Iterator[Event]:
    """Jepsen log lines (`INFO  jepsen.util - <process>\t:<type>\t:<f>\t<value>`) as Events;
    other log lines are skipped."""
    src = str(path)
    conv = _Converter(src)
    with open(path, encoding="utf-8") as fh:
        for lineno, raw in enumerate(fh, 1):
            if "jepsen.util" not in raw:
                continue
            m = _LOG_LINE.search(raw.rstrip("\r\n"))
            if m is None:
                raise HistoryError(src, lineno, "a jepsen.util line without process, type, f")
            text = (m["v"] or "nil").strip()
            value = _read_value(text)
            proc = m["p"]
            process: Any = Keyword(proc[1:]) if proc.startswith(":") else (
                int(proc) if proc.isdigit() else proc)
            yield conv.add(lineno, process, m["type"], Keyword(m["f"]), value)


def read_jepsen_log_events(path: Path) -> list[Event]:
    """Jepsen log lines as Events; other log lines are skipped."""
    return list(iter_jepsen_log_events(path))


# --- JSON documents ---------------------------------------------------------------------------

_WS: Final = re.compile(r"[ \t\n\r]*")
# a JSON object with a string key, or an array of them (or an empty one), where EDN has keywords
_JSON_START: Final = re.compile(r'(\[[ \t\n\r]*)?\{[ \t\n\r]*"|\[[ \t\n\r]*\]')


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
