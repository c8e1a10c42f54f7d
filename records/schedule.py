"""schedule.json: a run's fault schedule, step by step (fencecheck/nemesis/schedule.py plays
and records it; `run --replay` and `shrink` read it back).

`{"format": 1, "steps": [Step, ...]}`. Every release wrote format 1 with the version in `format`
(not `format_version`, as the files were before the other records had one) and every field of a
step but `drawn_hold_s`, which came later and is written only where a hold ended early (absent:
the hold drawn was the one played, None), and `delay_s`, written only where a fault started a
drawn delay after its fresh grant (the fault's `delay_s`, `--pause-delay`; absent: at once). A
step's `value` is what its targets were when recorded, JSON as the fault gave it. Which roles and
faults are valid is the schedule's to judge (a role the faults know, a fault the run has), not
this record's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Final

import msgspec

from fencecheck.records.base import (
    RecordError,
    RecordFile,
    convert,
    decode_json,
    encode_json,
    schema_of,
)

SCHEDULE_FORMAT: Final = 1

Seconds = Annotated[float, msgspec.Meta(ge=0)]


class Step(msgspec.Struct, frozen=True):
    """One fault of a schedule: `gap_s` after the previous fault stopped (or the run started),
    `fault` starts, on targets by `role` (`value`: what they were when recorded), for `hold_s`
    (`drawn_hold_s`: the hold drawn for it, where it ended early when its successor was seen)."""

    gap_s: Seconds
    fault: str
    hold_s: Seconds
    role: str
    value: Any = None
    waited: bool = False  # started only once a fresh grant came (or 3 s passed)
    drawn_hold_s: Seconds | None = None
    # how long after that fresh grant it started (delay_s, --pause-delay); absent: at once
    delay_s: Seconds | None = None


class Schedule(msgspec.Struct, kw_only=True):
    """One schedule.json."""

    format: int = SCHEDULE_FORMAT
    steps: list[Step] = []


def _step_document(step: Step) -> dict[str, Any]:
    d: dict[str, Any] = msgspec.to_builtins(step, enc_hook=str)
    if d["drawn_hold_s"] is None:
        del d["drawn_hold_s"]  # the hold played was the one drawn
    if d["delay_s"] is None:
        del d["delay_s"]  # started as soon as its grant was seen
    return d


def encode(rec: Schedule) -> bytes:
    """The file: two-space indent; a value JSON has no type for is written as its str()."""
    return encode_json({"format": rec.format, "steps": [_step_document(s) for s in rec.steps]})


def decode(data: bytes | str, where: str = "schedule.json") -> Schedule:
    """A schedule.json; RecordError naming where and the field (`steps[0].hold_s: ...`)."""
    doc = decode_json(data, where)
    if not isinstance(doc, dict):
        raise RecordError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    version = doc.get("format")
    if version != SCHEDULE_FORMAT:
        raise RecordError(f"{where}: format {version!r}: this fencecheck reads schedules of "
                          f"format {SCHEDULE_FORMAT}")
    if "steps" not in doc:
        raise RecordError(f"{where}: steps: missing")
    return convert(doc, Schedule, where)


def of_steps(steps: Sequence[Step]) -> Schedule:
    return Schedule(steps=list(steps))


read, write = (_file := RecordFile(decode, encode)).read, _file.write


def schema() -> dict[str, Any]:
    return schema_of(Schedule, "fencecheck schedule.json",
                     "A run's fault schedule: each step's gap before it, fault, hold, target "
                     "role and recorded targets.")
