"""Jepsen histories as our `Event`s: an EDN history (`iter_edn_events`, `read_edn_events`: a
whole-file vector, or one map a line) and Jepsen log lines (`iter_jepsen_log_events`,
`read_jepsen_log_events`: `INFO  jepsen.util - <process>\t:<type>\t:<f>\t<value>`, the form
Porcupine's test data keeps too).

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
(multi-key) histories are not split out.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, Literal, cast

from fencecheck.checker.base import NEMESIS, Event, EventType, HistoryError
from fencecheck.checker.edn import Keyword, _EdnError, _read_value, read_edn

_LOCK_FS: Final = frozenset(("acquire", "release", "renew"))


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
