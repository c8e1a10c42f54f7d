"""Core data of a history and of check results, and the `Check` protocol.

An `Event` is one line of history.jsonl (the record `fencecheck.records.history.Line`). An `Op`
is an invoke paired with its completion; the checks work on ops. Results are plain data that
serialise to DESIGN.md's results.json shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import msgspec

from fencecheck.records import results as results_record
from fencecheck.records.history import NEMESIS as NEMESIS
from fencecheck.records.history import EventType as EventType
from fencecheck.records.history import Line
from fencecheck.records.results import RESULTS_FORMAT

Completion = Literal["ok", "fail", "info"]
Process = int | str
Verdict = bool | Literal["unknown"]

EVENT_TYPES: frozenset[str] = frozenset(("invoke", "ok", "fail", "info"))
CLIENT_FS: frozenset[str] = frozenset(("acquire", "renew", "release", "read", "write"))
Event = Line  # one line of history.jsonl: the record fencecheck.records.history owns


class Op(msgspec.Struct, frozen=True, gc=False):
    """An invoke paired with its completion. (A frozen msgspec Struct rather than a dataclass:
    a million-event history makes half a million of them, and a Struct is made in C, 5x faster.
    Not tracked by the cyclic GC, which saves its 16-byte header on each: an op's value comes
    from JSON and cannot lead back to the op.)

    `type` is the completion's type; an invoke never completed counts as `info`, and then
    `end_index`/`end_time` are None. `value` is the invoke's value updated by the completion's
    (so an ok acquire carries both `lock`/`lease_ms` and `token`).
    """

    process: Process
    f: str
    type: Completion
    index: int
    time: int
    end_index: int | None
    end_time: int | None
    value: dict[str, Any] | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.type == "ok"

    def get(self, name: str, default: Any = None) -> Any:
        return default if self.value is None else self.value.get(name, default)


@dataclass(frozen=True, slots=True)
class OpRef:
    """How a violation names an operation: enough to find it in the history."""

    process: Process
    index: int
    time_ns: int  # the invoke's time
    token: int | None = None
    f: str | None = None
    end_index: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "process": self.process,
            "index": self.index,
            "time_ns": self.time_ns,
            "token": self.token,
        }
        if self.f is not None:
            out["f"] = self.f
        if self.end_index is not None:
            out["end_index"] = self.end_index
        return out


def op_ref(op: Op) -> OpRef:
    token = op.get("token")
    return OpRef(
        process=op.process,
        index=op.index,
        time_ns=op.time,
        token=token if isinstance(token, int) else None,
        f=op.f,
        end_index=op.end_index,
    )


@dataclass(frozen=True, slots=True)
class Violation:
    """One definite finding. `stale_grant`/`next_grant` are grant ids (checker.grants) that tie
    it to an incident; they stay out of the JSON, where `incident` names the incident instead."""

    kind: str
    explanation: str
    ops: tuple[OpRef, ...]
    lock: str | None = None
    key: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    stale_grant: int | None = None
    next_grant: int | None = None
    incident: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        if self.lock is not None:
            out["lock"] = self.lock
        if self.key is not None:
            out["key"] = self.key
        out["ops"] = [o.to_json() for o in self.ops]
        out["explanation"] = self.explanation
        out.update(self.extra)
        if self.incident is not None:
            out["incident"] = self.incident
        return out


@dataclass(slots=True)
class CheckResult:
    """One check's verdict. `skipped` says why a check could not judge (then valid is True)."""

    name: str
    valid: Verdict
    violations: list[Violation] = field(default_factory=list)
    skipped: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "valid": self.valid,
            "violations": [v.to_json() for v in self.violations],
        }
        if self.skipped is not None:
            out["skipped"] = self.skipped
        out.update(self.details)
        return out


FORMAT_VERSION = RESULTS_FORMAT  # of results.json (fencecheck.records.results owns it)


@dataclass(slots=True)
class Results:
    """What `check_history` returns; `to_json()` is results.json (DESIGN.md)."""

    valid: Verdict
    checks: dict[str, CheckResult]
    stats: dict[str, Any]
    incidents: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "tool_version": tool_version(),
            "valid": self.valid,
            "incidents": self.incidents,
            "checks": {name: c.to_json() for name, c in self.checks.items()},
            "stats": self.stats,
        }

    def record(self) -> results_record.Results:
        """results.json as its record: what the run folder, `--out` and `--json` get."""
        return results_record.from_document(self.to_json(), "results")

    @property
    def violation_count(self) -> int:
        return sum(int(c.details.get("count", len(c.violations))) for c in self.checks.values())

    @property
    def exit_code(self) -> int:
        """0 valid, 1 violations found, 2 unknown (DESIGN.md)."""
        if self.valid is True:
            return 0
        return 1 if self.valid is False else 2


_VERSION: list[str] = []


def tool_version() -> str:
    """The installed fencecheck version (read once: importlib.metadata scans site-packages)."""
    if not _VERSION:
        from importlib.metadata import PackageNotFoundError, version

        try:
            _VERSION.append(version("fencecheck"))
        except PackageNotFoundError:
            _VERSION.append("0+unknown")
    return _VERSION[0]


def combine(results: Sequence[CheckResult]) -> Verdict:
    """False if any check found a violation, else unknown if any is unknown, else True."""
    if any(r.valid is False for r in results):
        return False
    if any(r.valid == "unknown" for r in results):
        return "unknown"
    return True


class CheckerError(Exception):
    """Root error of the checker package: bad input the user must fix (exit 3)."""


class HistoryError(CheckerError):
    """A history file that is not as specified; the message starts with `file:line:`."""

    def __init__(self, path: str, line: int, what: str) -> None:
        super().__init__(f"{path}:{line}: {what}")
        self.path = path
        self.line = line
        self.what = what


class Check(Protocol):
    """A pure analysis of a history. Must not raise on a well-formed history: a check that
    cannot judge returns `skipped`, and one that runs out of time returns valid="unknown"."""

    name: str

    def __call__(self, ops: Sequence[Op]) -> CheckResult: ...
