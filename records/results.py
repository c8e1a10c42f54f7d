"""results.json: the verdict on one history (docs/checks.md), and the contract other tools
read. Times are integer ns since the run started; every time field's name ends in _ns.

A check and a violation carry more than their common fields: what each check measured (a
mutex check's `grants`, a linearizability check's `model`) and what each kind of violation adds
(the linearizable prefix). Those stay where they are in the file, beside the common fields, and
are `extra` in the record: `decode` gathers them and `encode` puts them back, so a round trip
keeps every field and the file keeps its shape. `stats` is the checker's open table of counts.

Types are strict (a token that is a string is an error naming the field); presence is not where
a reader can do without a field: a results.json without `valid` is unknown, a violation without
ops names none. The checker writes every field; hand-made run folders often have a few.

Bump `RESULTS_FORMAT` with any change a reader of results.json must know about, and upgrade the
older format on decode. Format 0 is a file without `format_version` (written before results.json
had a version): its op references and violations name their time `time`, not `time_ns`, and it
has no `tool_version` and no incidents. `decode` reads it as format 1, so `encode` writes it back
as format 1.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from fencecheck.records.base import (
    DOCS,
    RecordError,
    RecordFile,
    convert,
    decode_json,
    encode_json,
    schema_of,
)

RESULTS_FORMAT: Final = 1

Nat = Annotated[int, Meta(ge=0)]
Id = Annotated[int, Meta(ge=1)]
Process = int | Literal["nemesis"]
Verdict = bool | Literal["unknown"]


class OpRef(msgspec.Struct, kw_only=True):
    """An operation of the history, by its invoke."""

    process: Process
    index: Nat
    time_ns: Nat
    token: int | None
    f: str | UnsetType = UNSET
    end_index: Nat | UnsetType | None = UNSET


class Violation(msgspec.Struct, kw_only=True):
    """One definite finding of a check; `incident` is the id of the incident it belongs to."""

    kind: str
    lock: str | UnsetType = UNSET
    key: str | UnsetType = UNSET
    ops: list[OpRef] = []
    explanation: str = ""
    time_ns: Nat | UnsetType = UNSET
    extra: dict[str, Any] = {}
    incident: Id | UnsetType = UNSET


class Check(msgspec.Struct, kw_only=True):
    """One check's verdict. `skipped` says why it could not judge (then valid is True); it
    lists at most 100 violations and counts all of them in `count` and `count_by_kind`."""

    valid: Verdict = "unknown"
    violations: list[Violation] = []
    skipped: str | UnsetType = UNSET
    count: Nat | UnsetType = UNSET
    count_by_kind: dict[str, Nat] | UnsetType = UNSET
    first_violation_ns: Nat | UnsetType = UNSET
    error: str | UnsetType = UNSET  # a check that crashed: its verdict is unknown
    extra: dict[str, Any] = {}

    @property
    def violation_count(self) -> int:
        return len(self.violations) if self.count is UNSET else self.count


class Grant(msgspec.Struct, kw_only=True):
    process: Process
    index: Nat
    token: int | None = None
    ok_time_ns: Nat | UnsetType = UNSET
    surely_held_end_ns: Nat | UnsetType | None = UNSET


class Fault(msgspec.Struct, kw_only=True):
    """The nemesis op that made a grant stale: its start, its end (None: never stopped)."""

    f: str
    start_time_ns: Nat
    end_time_ns: Nat | None
    value: Any


class ViolationRef(msgspec.Struct, kw_only=True):
    check: str
    n: Nat  # position in that check's `violations`


class Notice(msgspec.Struct, kw_only=True):
    """The first lost-lock notice about a grant (checker.notices): when its process was told,
    and how that fell against the grant's surely-held end by its lease (`lead_ns` = end - time:
    > 0 an early warning, < 0 late; None without a lease)."""

    grant: Nat
    process: Process
    lock: str
    token: int | None
    reason: str
    index: Nat
    time_ns: Nat
    surely_held_end_ns: Nat | None
    lead_ns: int | None
    notices: Nat  # notices about this grant


class Incident(msgspec.Struct, kw_only=True):
    """A stale grant, the fault that made it stale, the next grant, what followed from it;
    `notice`, where its lock library told its process the lock was lost."""

    id: Id
    lock: str
    stale_grant: Grant
    fault: Fault | None
    next_grant: Grant | None
    violations: list[ViolationRef]
    kinds: list[str]
    story: str
    notice: Notice | UnsetType = UNSET


class Results(msgspec.Struct, kw_only=True):
    """One results.json."""

    format_version: Literal[1] = RESULTS_FORMAT
    tool_version: str = ""
    valid: Verdict = "unknown"
    incidents: list[Incident] = []
    checks: dict[str, Check] = {}
    stats: dict[str, Any] = {}

    @property
    def first_violation_ns(self) -> int | None:
        first = self.stats.get("first_violation_ns")
        return first if isinstance(first, int) and not isinstance(first, bool) else None

    def violations(self) -> list[tuple[str, Violation]]:
        """Every violation of every check, with its check's name."""
        return [(name, v) for name, c in self.checks.items() for v in c.violations]

    def kinds(self) -> frozenset[str]:
        return frozenset(v.kind for _, v in self.violations())


def check_details(check: Check) -> dict[str, Any]:
    """What a check measured: its fields but its verdict, violations and skip reason, as the
    file has them."""
    doc = _spread(msgspec.to_builtins(check))
    return {k: v for k, v in doc.items() if k not in ("valid", "violations", "skipped")}


_CHECK_FIELDS = frozenset(Check.__struct_fields__) - {"extra"}
_VIOLATION_FIELDS = frozenset(Violation.__struct_fields__) - {"extra"}


def _gather(doc: dict[str, Any], known: frozenset[str]) -> dict[str, Any]:
    out = {k: v for k, v in doc.items() if k in known}
    out["extra"] = {k: v for k, v in doc.items() if k not in known}
    return out


def _spread(doc: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in doc.items():
        if k == "extra":
            out.update(v)
        else:
            out[k] = v
    return out


def from_document(doc: Any, where: str = "results.json") -> Results:
    """A decoded results.json document (or the checker's `to_json()`) as the record."""
    if not isinstance(doc, dict):
        raise RecordError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    version = doc.get("format_version")
    if isinstance(version, int) and version != RESULTS_FORMAT:
        raise RecordError(f"{where}: format_version {version}: this fencecheck reads format "
                          f"{RESULTS_FORMAT}")
    if "format_version" not in doc:
        doc = _from_format_0(doc)
    checks = doc.get("checks", {})
    if not isinstance(checks, dict):
        raise RecordError(f"{where}: checks: expected `object`, got `{type(checks).__name__}`")
    rec = convert({k: v for k, v in doc.items() if k != "checks"}, Results, where)
    # one check at a time, so that an error names the check (msgspec would say `checks[...]`)
    rec.checks = {name: convert(_check_doc(c), Check, where, f"checks.{name}")
                  for name, c in checks.items()}
    return rec


def _renamed_time(d: Any) -> Any:
    if isinstance(d, dict) and "time" in d and "time_ns" not in d:
        return {("time_ns" if k == "time" else k): v for k, v in d.items()}
    return d


def _from_format_0(doc: dict[str, Any]) -> dict[str, Any]:
    """Format 0's `time` of an op reference and of a violation as format 1's `time_ns`."""
    checks = doc.get("checks")
    if not isinstance(checks, dict):
        return doc
    upgraded: dict[str, Any] = {}
    for name, c in checks.items():
        if isinstance(c, dict) and isinstance(c.get("violations"), list):
            vs = []
            for v in c["violations"]:
                v = _renamed_time(v)
                if isinstance(v, dict) and isinstance(v.get("ops"), list):
                    v = {**v, "ops": [_renamed_time(o) for o in v["ops"]]}
                vs.append(v)
            c = {**c, "violations": vs}
        upgraded[name] = c
    return {**doc, "checks": upgraded}


def _check_doc(c: Any) -> Any:
    if not isinstance(c, dict):
        return c
    c = _gather(c, _CHECK_FIELDS)
    if isinstance(c.get("violations"), list):
        c["violations"] = [_gather(v, _VIOLATION_FIELDS) if isinstance(v, dict) else v
                           for v in c["violations"]]
    return c


def to_document(rec: Results) -> dict[str, Any]:
    """The record as the JSON document results.json holds."""
    doc: dict[str, Any] = msgspec.to_builtins(rec)
    for name, c in doc["checks"].items():
        c["violations"] = [_spread(v) for v in c["violations"]]
        doc["checks"][name] = _spread(c)
    return doc


def decode(data: bytes | str, where: str = "results.json") -> Results:
    return from_document(decode_json(data, where), where)


def encode(rec: Results) -> bytes:
    return encode_json(to_document(rec))


read, write = (_file := RecordFile(decode, encode)).read, _file.write


def schema() -> dict[str, Any]:
    """Generated from the record; checks and violations allow their extra fields beside the
    common ones (the `extra` of the record is not a field of the file)."""
    s = schema_of(Results, "fencecheck results.json",
                  "The verdict of fencecheck's checks on one history: valid, invalid or "
                  "unknown, each check's violations, and the incidents they group into. Times "
                  "are integer ns since the run started; every time field's name ends in _ns. "
                  f"The checks: {DOCS}/checks.md")
    for name in ("Check", "Violation"):
        d = s["$defs"][name]
        d["properties"].pop("extra", None)
        d["additionalProperties"] = True
    return s
