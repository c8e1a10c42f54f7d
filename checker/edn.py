"""An EDN reader for Jepsen histories: `read_edn(text)` yields the top-level forms with their
first line (a top-level vector or list, a whole Jepsen history, is opened into its ops),
`Keyword` is an EDN keyword's name, `_read_value` reads one form of a log line's value.

It covers what Jepsen histories use: maps, vectors, lists, sets, keywords, strings, numbers,
nil, booleans, comments, `#_`, tags (dropped). Maps become dicts, vectors and lists lists, sets
frozensets; `checker.jepsen` turns the op maps into our events.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Final


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
