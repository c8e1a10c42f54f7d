"""The history event, the one owner of its shape: a worker's or the nemesis's log line (`Event`)
and a history.jsonl line (`Line`: the same event with its `index`), docs/history-format.md.

- `Line`: `index` and `time` integers >= 0 (ns since the run started, on the controller host's
  monotonic clock), `process` an integer or "nemesis", `type` one of invoke, ok, fail, info, `f`
  a string, `value` an object or null (absent: null), `error` a string or null (absent: null).
  Unknown fields are ignored; known ones must be as typed. What the checks read from a value
  (lock names, tokens, leases) is the checker's table (checker.reader VALUES).
- `Event`: a log line, written by `EventLog`s and merged into a history by time: the fields of
  `Line` but `index`, with `value` whatever its writer gave (the checker holds the history's).
- `encode_event`, `encode_line`: one compact JSON line (`"value"` always, `"error"` only when
  set). msgspec writes it; `json.dumps` where msgspec would change its meaning (NaN, which
  msgspec writes as null, keys that are not strings), so a line means what it meant before.
- `decode_line`, `decode_event`: strict; `LineError` (a RecordError) names the file, the line and
  the field: `history.jsonl:17: time: expected int >= 0, got str`. `DECODER` is the bare decoder
  of a `Line` (the checker's fast path decodes blocks of lines with it, `decode_lines`).
- `FINAL_READ_PROCESS_BASE`: the final read's processes count from it (the one definition: the
  controller starts the final read with it, the checker names those processes by it).
- `schema()`: the JSON Schema of a line, generated from `Line`.
- `NOTICE`, `Notice`, `notice_lines`: a lost-lock notice, the one `f` a process may record while
  an operation of its own is in flight. Its value (`Notice`: `lock`, `token`, `reason`) says that
  the client's *library* told the process its lock or leadership is lost or in doubt (client-go's
  `OnStoppedLeading`, kazoo's and Curator's `SUSPENDED`/`LOST`, a failed renewal's callback). It
  is an observation, not an operation on the service: an invoke and an ok at one instant, written
  together (`notice_lines`).

Lines carry no version: every release wrote these fields (`index` first, `value` always), so the
format is `HISTORY_FORMAT` 1; a change a reader must know about would add a versioned field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Annotated, Any, Final, Literal

import msgspec

from fencecheck.records.base import DOCS, RecordError

HISTORY_FORMAT: Final = 1
FINAL_READ_PROCESS_BASE: Final = 1_000_000
NEMESIS: Final = "nemesis"

Nat = Annotated[int, msgspec.Meta(ge=0)]
EventType = Literal["invoke", "ok", "fail", "info"]
EVENT_TYPES: Final[tuple[EventType, ...]] = ("invoke", "ok", "fail", "info")
Process = int | Literal["nemesis"]
NOTICE: Final = "notice"


class Line(msgspec.Struct, gc=False):
    """One line of history.jsonl. (Untracked by the cyclic GC: a decoded line cannot refer back
    to itself; a million of them are read at once.)"""

    index: Nat
    time: Nat  # ns since the run started, the controller host's monotonic clock
    process: Process
    type: EventType
    f: str
    value: dict[str, Any] | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The line as the file holds it."""
        out: dict[str, Any] = {"index": self.index, "time": self.time, "process": self.process,
                               "type": self.type, "f": self.f, "value": self.value}
        if self.error is not None:
            out["error"] = self.error
        return out


class Event(msgspec.Struct, omit_defaults=True):
    """One event of a log (a worker's, the final read's, the nemesis's): a history line before
    the merge numbers it. `value` is required on decode (every writer wrote it)."""

    time: int  # ns since the controller's t0
    process: int | str
    type: EventType
    f: str
    value: Any
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"time": self.time, "process": self.process, "type": self.type,
                             "f": self.f, "value": self.value}
        if self.error is not None:
            d["error"] = self.error
        return d


class Notice(msgspec.Struct, kw_only=True):
    """The value of a `notice` line (its invoke's and its ok's): the library told the process
    that its lock `lock` is lost or in doubt. `token`: the grant it was about (null where the lock
    has none, or the library did not say); `reason`: the library's words (`SUSPENDED`, `LOST`,
    `OnStoppedLeading`, `renewal-failed`)."""

    lock: str
    token: int | None = None
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"lock": self.lock, "token": self.token, "reason": self.reason}


def notice_lines(time: int, process: int, notice: Notice) -> bytes:
    """A notice as a log writes it: its invoke and its ok at `time`, two lines in one string
    (one write, so that nothing comes between them)."""
    value = notice.to_json()
    return (encode_event(Event(time, process, "invoke", NOTICE, value))
            + encode_event(Event(time, process, "ok", NOTICE, value)))


class LineError(RecordError):
    """A line that is not a history line: `where:line: field: what`."""

    def __init__(self, where: str, line: int, what: str) -> None:
        super().__init__(f"{where}:{line}: {what}")
        self.where, self.line, self.what = where, line, what


DECODER: Final = msgspec.json.Decoder(Line)
_EVENT_DECODER: Final = msgspec.json.Decoder(Event)
_ENCODER: Final = msgspec.json.Encoder()


def _nonfinite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_nonfinite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_nonfinite(v) for v in value)
    return False


def _dumps(rec: Event | Line, default: Callable[[Any], Any] | None) -> bytes:
    return json.dumps(rec.to_json(), default=default, separators=(",", ":")).encode() + b"\n"


def _encode(rec: Event | Line, value: Any, default: Callable[[Any], Any] | None = None,
            encoder: msgspec.json.Encoder = _ENCODER) -> bytes:
    try:
        line = encoder.encode(rec)
    except (TypeError, msgspec.EncodeError):
        return _dumps(rec, default)
    if b"null" in line and _nonfinite(value):
        return _dumps(rec, default)
    return line + b"\n"


def encode_event(ev: Event, default: Callable[[Any], Any] | None = None) -> bytes:
    """One log line, newline included (written twice per operation of every worker).
    `default`: what to write for a value JSON has no type for (the nemesis log gives `str`:
    a fault's value is a record of what it did, never refused); None: TypeError."""
    if default is None:
        return _encode(ev, ev.value)
    return _encode(ev, ev.value, default, msgspec.json.Encoder(enc_hook=default))


def encode_line(line: Line) -> bytes:
    """One history.jsonl line, newline included: `value` always, `error` only when set."""
    if line.error is None:
        # the Struct writes every field; the file leaves out an error that is not there
        return _encode(Event(line.time, line.process, line.type, line.f, line.value),
                       line.value).replace(b"{", b'{"index":%d,' % line.index, 1)
    return _encode(line, line.value)


def problem(e: msgspec.MsgspecError) -> str:
    """msgspec's "Expected `int`, got `str` - at `$.time`" as "time: expected int, got str"."""
    text = str(e).replace("`", "")
    field: str | None = None
    if " - at $" in text:
        text, _, where = text.rpartition(" - at $")
        field = where.lstrip(".").replace("[...]", "") or None
    if text.startswith("Invalid enum value "):
        got = text.removeprefix("Invalid enum value ")
        if field == "type":
            text = f"{got} is not one of invoke, ok, fail, info"
        elif field == "process":
            text = f'must be an integer or "nemesis", not {got}'
    elif text.startswith("Object missing required field "):
        field, text = text.removeprefix("Object missing required field "), "missing"
    elif text.startswith("Expected object, got"):
        text = "not a JSON object but " + text.removeprefix("Expected object, got ")
    elif text == "Input data was truncated":
        text = "not valid JSON (it ends too early)"
    elif text.startswith("JSON is malformed"):
        text = f"not valid JSON ({text.removeprefix('JSON is malformed: ')})"
    else:
        text = text[:1].lower() + text[1:]
    return f"{field}: {text}" if field else text


def _decode(decoder: msgspec.json.Decoder[Any], raw: bytes | str, where: str, line: int) -> Any:
    try:
        if isinstance(raw, bytes) and not raw.isascii():
            raw.decode("utf-8")  # msgspec skips the names of unknown fields without checking them
        return decoder.decode(raw)
    except UnicodeDecodeError as e:
        raise LineError(where, line, f"not UTF-8 text (byte {e.start} of the line)") from None
    except msgspec.MsgspecError as e:
        if not raw.strip():
            raise LineError(where, line, "empty line (one JSON object per line; blank lines "
                                         "only at the end)") from None
        raise LineError(where, line, problem(e)) from None
    except RecursionError:
        raise LineError(where, line, "value: nested too deeply") from None


def decode_line(raw: bytes | str, where: str = "history.jsonl", line: int = 1) -> Line:
    """One history.jsonl line; LineError naming where, the line and the field. (A key written
    twice in one object is the checker's to refuse: checker.reader.)"""
    rec: Line = _decode(DECODER, raw, where, line)
    return rec


def decode_event(raw: bytes | str, where: str = "events.jsonl", line: int = 1) -> Event:
    """One log line; LineError naming where, the line and the field."""
    rec: Event = _decode(_EVENT_DECODER, raw, where, line)
    return rec


def line_from_builtins(d: Any, where: str = "<events>", line: int = 1) -> Line:
    """An event given as a dict (the Python API) held to the line's types."""
    try:
        return msgspec.convert(d, Line, strict=True)
    except msgspec.MsgspecError as e:
        raise LineError(where, line, problem(e)) from None
    except RecursionError:
        raise LineError(where, line, "value: nested too deeply") from None


def event_from_builtins(d: Any, where: str = "event", line: int = 1) -> Event:
    """A decoded log line (a dict) as an Event; LineError naming the field."""
    if isinstance(d, dict) and "value" not in d:
        d = {**d, "value": None}
    try:
        return msgspec.convert(d, Event, strict=True)
    except msgspec.MsgspecError as e:
        raise LineError(where, line, problem(e)) from None


def schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of one history.jsonl line, generated from `Line`."""
    s: dict[str, Any] = msgspec.json.schema(Line)
    s["$defs"]["Line"]["description"] = (
        "One line of a fencecheck history (history.jsonl): an operation's invoke or completion "
        "(ok: it happened; fail: it surely did not; info: unknown) by a client process or the "
        "nemesis. Times are integer ns since the run started. The format: "
        f"{DOCS}/history-format.md")
    s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    s["title"] = "fencecheck history line"
    return s
