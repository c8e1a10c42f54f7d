"""The one strict reader of history lines: the line's record, one table for values.

- `Line`: a history.jsonl line, the record fencecheck.records.history owns (re-exported with its
  `DECODER`). `decode_line` checks every field's type and range (integer ns times and indexes
  >= 0, process an integer or "nemesis", type one of four, f and error strings, value an object
  or null) and that no key repeats; a wrong line is a `HistoryError` naming the line and the
  field: `history.jsonl:17: time: expected int >= 0, got str`.
- `VALUES`: what the lock checks read from an op's value, per f (DESIGN.md's history format):
  lock names are strings, tokens integers of any size or null, lease_ms a finite non-negative
  number or null, keys strings, attempt_ns an integer ns time, a notice's reason a string.
  `check_value` holds a paired op to it: a value the checks would need and cannot use is bad
  input, never silently skipped.
- `line_schema()`: the JSON Schema of a line, from `Line` and `VALUES` (`fencecheck schema
  history`).
- `HOT_KEYS` (`KEY_NAME`, `LOCK_NAME`, ...): the value keys the hot loops look up, as the
  string objects msgspec puts in the dicts it decodes (`decoded_keys`), so that a lookup ends
  at the identity test instead of comparing bytes.
- `repeated_key(raw)`: the first key that appears twice in one object of a line, or None.
  msgspec (like most JSON decoders) keeps the last of two equal keys, so `{"token": 5, ...,
  "token": 3}` would be judged on 3 while another reader sees 5: bad input (I-JSON, RFC 7493),
  named by `decode_line`. `keys_unique(raw, d)` is the fast path's cheap test of the same.

Why msgspec: measured on the 1,000,009-event benchmark history (CPU s, one process), stdlib
`json.loads` per line 4.0, orjson 0.71, msgspec into `Line` 0.41 with the checks included; orjson
would still need the validation pass in Python.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, Final

import msgspec

from fencecheck.checker.base import HistoryError, Op
from fencecheck.records import history as history_record
from fencecheck.records.history import DECODER as DECODER  # re-exported: the line's decoder
from fencecheck.records.history import Line as Line
from fencecheck.records.history import LineError


class RepeatedKey(ValueError):
    """A key written twice in one JSON object (raised by `STRICT_JSON`)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise RepeatedKey(k)
            seen.add(k)
    return d


# the stdlib decoder with RepeatedKey for a key twice in one object, at any depth
STRICT_JSON: Final = json.JSONDecoder(object_pairs_hook=_unique)


def repeated_key(raw: bytes | str) -> str | None:
    """The first key found twice in one object of the JSON text `raw` (at any depth), or None
    (also for text that is not JSON: the decoder names that)."""
    try:
        STRICT_JSON.decode(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
    except RepeatedKey as e:
        return e.key
    except (ValueError, RecursionError):
        return None
    return None


def keys_unique(raw: bytes, d: Line) -> bool:
    """Whether no key of the line `raw`, decoded as `d`, repeats: cheap for the usual line.

    Every key of a JSON object is followed by one colon outside any string, so a line has at
    most as many keys as colons. The keys `d` shows (its five fields, `value` and `error` when
    not null, the value's own keys) are distinct. So when the colons are no more than those,
    nothing repeats; the usual line of a fencecheck history is exactly that. Otherwise (an
    explicit null, an unknown field, a nested object, a colon in a string) the line is parsed
    again to look."""
    v = d.value
    shown = (5 if v is None else 6 + len(v)) + (d.error is not None)
    colons = raw.count(b":")
    if colons <= shown:
        return True
    # a completion of our writer: `"value":null` is the one key beyond those shown
    if colons == shown + 1 and v is None and b'"value":null' in raw:
        return True
    return repeated_key(raw) is None


def decode_line(raw: bytes | str, src: str, lineno: int) -> Line:
    """One line as a `Line` (fencecheck.records.history), or HistoryError(src, lineno, "field:
    what"), a key written twice in one object included."""
    try:
        d = history_record.decode_line(raw, src, lineno)
    except LineError as e:
        raise HistoryError(src, lineno, e.what) from None
    b = raw if isinstance(raw, bytes) else raw.encode()
    if not keys_unique(b, d):
        raise HistoryError(src, lineno, repeated_message(repeated_key(b)))
    return d


def repeated_message(key: str | None) -> str:
    """The message for a key written twice in one object."""
    return (f"key {json.dumps(key)} appears twice in one object (readers differ on which one "
            "counts)")


def line_from_dict(d: Any, src: str, lineno: int) -> Line:
    """An event given as a dict (the Python API) held to the same schema."""
    try:
        return history_record.line_from_builtins(d, src, lineno)
    except LineError as e:
        raise HistoryError(src, lineno, e.what) from None


# ---- values: one table, read by check_value and by line_schema ----

def _string(x: Any) -> bool:
    return type(x) is str


def _string_or_null(x: Any) -> bool:
    return x is None or type(x) is str


def _token(x: Any) -> bool:
    return x is None or type(x) is int


def _lease(x: Any) -> bool:
    t = type(x)
    return x is None or (t is int and x >= 0) or (t is float and math.isfinite(x) and x >= 0)


def _lease_number(x: Any) -> bool:
    return x is not None and _lease(x)


def _ns(x: Any) -> bool:
    return type(x) is int and x >= 0


Kind = tuple[str, Callable[[Any], bool], dict[str, Any]]  # what it must be, test, JSON Schema
STRING: Final[Kind] = ("a string", _string, {"type": "string"})
STRING_OR_NULL: Final[Kind] = ("a string or null", _string_or_null,
                               {"type": ["string", "null"]})
TOKEN: Final[Kind] = ("an integer or null", _token, {"type": ["integer", "null"]})
LEASE: Final[Kind] = ("a finite non-negative number or null", _lease,
                      {"type": ["number", "null"], "minimum": 0})
LEASE_NUMBER: Final[Kind] = ("a finite non-negative number", _lease_number,
                             {"type": "number", "minimum": 0})
NS: Final[Kind] = ("an integer ns time >= 0", _ns, {"type": "integer", "minimum": 0})

# f -> field -> (kind, required: "always", "ok" (on an ok op), or "no")
VALUES: Final[dict[str, dict[str, tuple[Kind, str]]]] = {
    "acquire": {"lock": (STRING, "always"), "lease_ms": (LEASE, "no"), "token": (TOKEN, "no"),
                "attempt_ns": (NS, "no")},
    "renew": {"lock": (STRING, "always"), "lease_ms": (LEASE_NUMBER, "ok"),
              "token": (TOKEN, "no")},
    "release": {"lock": (STRING, "always"), "token": (TOKEN, "no")},
    "read": {"key": (STRING, "no"), "lock": (STRING_OR_NULL, "no"), "token": (TOKEN, "no")},
    "write": {"key": (STRING, "no"), "lock": (STRING_OR_NULL, "no"), "token": (TOKEN, "no")},
    # a lost-lock notice (fencecheck.records.history `Notice`): invoke and ok at one instant
    "notice": {"lock": (STRING, "always"), "token": (TOKEN, "no"), "reason": (STRING, "no")},
}
_MISSING: Final = object()


def _describe(x: Any) -> str:
    try:
        text = msgspec.json.encode(x).decode()
    except (msgspec.MsgspecError, TypeError, ValueError, OverflowError):
        text = repr(x)
    return text if len(text) <= 40 else text[:37] + "..."


def value_problem(op: Op) -> str | None:
    """What is wrong with a paired client op's value for the lock checks, or None."""
    spec = VALUES.get(op.f)
    if spec is None or op.process == "nemesis":
        return None
    v = op.value or {}
    for name, ((must, test, _), required) in spec.items():
        x = v.get(name, _MISSING)
        if x is _MISSING:
            if required == "always" or (required == "ok" and op.type == "ok"):
                return f"value.{name}: missing (a {op.f} needs it)"
            continue
        if not test(x):
            return f"value.{name}: must be {must}, not {_describe(x)}"
    if op.f == "acquire" and op.end_time is not None:
        attempt = v.get("attempt_ns")
        if attempt is not None and attempt > op.end_time:
            return (f"value.attempt_ns: {attempt} is after the acquire completed "
                    f"({op.end_time} ns)")
    return None


def decoded_keys(*names: str) -> tuple[str, ...]:
    """The string objects msgspec makes for these names as keys of a decoded object.

    msgspec keeps one string object per short dict key in a cache of its own, so the keys of
    every value dict it decodes are those objects, not the interpreter's interned constants. A
    lookup `v.get("key")` finds the entry by its hash and then compares the two strings' bytes;
    with msgspec's own object it stops at the identity test. (Measured in docs/checker-speed.md.
    If another key evicts one of these from msgspec's cache, its later dicts get a new object:
    lookups then compare bytes again, as before, and find the same entries.)"""
    return tuple(msgspec.json.decode(msgspec.json.encode(dict.fromkeys(names, 0))))


# the value keys the hot loops read (here, checker.fastload, checker.grants), as msgspec's objects
HOT_KEYS: Final = decoded_keys("key", "lock", "token", "lease_ms", "attempt_ns", "job")
KEY_NAME, LOCK_NAME, TOKEN_NAME, LEASE_MS_NAME, ATTEMPT_NS_NAME, JOB_NAME = HOT_KEYS

_STR_OR_NULL: Final = frozenset((str, type(None)))
_INT_OR_NULL: Final = frozenset((int, type(None)))

# The common shapes, tested in one flat expression each (the hot path of a million-event load:
# no calls but dict.get); a value that fails its shape is judged by value_problem, which holds it
# to VALUES and says why.
USUAL: Final[dict[str, Callable[[dict[str, Any]], bool]]] = {
    "acquire": lambda v: (type(v.get(LOCK_NAME)) is str and type(v.get(TOKEN_NAME)) in _INT_OR_NULL
                          and ((x := v.get(LEASE_MS_NAME)) is None or (type(x) is int and x >= 0))
                          and ATTEMPT_NS_NAME not in v),
    "renew": lambda v: (type(v.get(LOCK_NAME)) is str and type(x := v.get(LEASE_MS_NAME)) is int
                        and x >= 0 and type(v.get(TOKEN_NAME)) in _INT_OR_NULL),
    "release": lambda v: type(v.get(LOCK_NAME)) is str and type(v.get(TOKEN_NAME)) in _INT_OR_NULL,
    "read": lambda v: (type(v.get(KEY_NAME)) is str and type(v.get(LOCK_NAME)) in _STR_OR_NULL
                       and type(v.get(TOKEN_NAME)) in _INT_OR_NULL),
    "write": lambda v: (type(v.get(KEY_NAME)) is str and type(v.get(LOCK_NAME)) in _STR_OR_NULL
                        and type(v.get(TOKEN_NAME)) in _INT_OR_NULL),
    "notice": lambda v: (type(v.get(LOCK_NAME)) is str and type(v.get(TOKEN_NAME)) in _INT_OR_NULL
                         and type(v.get("reason", "")) is str),
}


def check_value(op: Op, src: str, lineno: int) -> None:
    """HistoryError(src, lineno, "value.field: what") if the op's value is not as VALUES says."""
    usual = USUAL.get(op.f)
    v = op.value
    if usual is not None and v is not None and usual(v):
        return
    problem = value_problem(op)
    if problem is not None:
        raise HistoryError(src, lineno, problem)


def line_schema() -> dict[str, Any]:
    """The JSON Schema of one history.jsonl line: the Line record's, with the values' table."""
    schema = history_record.schema()
    line = schema["$defs"]["Line"]
    branches = []
    for f, fields in VALUES.items():
        props = {name: dict(kind[2]) for name, (kind, _) in fields.items()}
        always = [name for name, (_, req) in fields.items() if req == "always"]
        client = {"f": {"const": f}, "process": {"type": "integer"}}
        branches.append({
            "if": {"properties": client, "required": ["f", "process"]},
            "then": {"properties": {"value": {"anyOf": [
                {"type": "object", "properties": props}, {"type": "null"}]}}},
        })
        if always:  # an invoke names them; a completion adds to the invoke's value
            branches.append({
                "if": {"properties": {**client, "type": {"const": "invoke"}},
                       "required": ["f", "process", "type"]},
                "then": {"properties": {"value": {"type": "object", "required": always}},
                         "required": ["value"]},
            })
    line["allOf"] = branches
    return schema
