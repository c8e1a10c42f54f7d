"""schedule.json through its record (fencecheck.records.schedule): the file a run writes decodes
and encodes back to every byte, every step round-trips, the files earlier releases wrote (no
`drawn_hold_s`, integer seconds) still load, and a wrong field is named in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fencecheck.nemesis.schedule import ScheduleError, load_steps, write_steps
from fencecheck.records import schedule as schedule_record
from fencecheck.records.base import RecordError
from fencecheck.records.schedule import SCHEDULE_FORMAT, Schedule, Step

STEPS = [Step(1.5, "pause", 2.25, "holder", {"targets": ["w2"]}, True),
         Step(0.7, "kill", 3.0, "as named", {"nodes": ["n1", "n3"]}),
         Step(0.05, "pause", 0.6, "holder", {"targets": ["c1"]}, True, drawn_hold_s=5.5),
         Step(0.0, "partition", 4.0, "minority", None)]


def test_the_schedule_a_run_wrote_round_trips(written_run: Path) -> None:
    path = written_run / "schedule.json"
    rec = schedule_record.read(path)
    assert rec.format == SCHEDULE_FORMAT and rec.steps
    assert schedule_record.encode(rec) == path.read_bytes()
    assert load_steps(path, ["pause"]) == tuple(rec.steps)


@pytest.mark.parametrize("step", STEPS, ids=lambda s: f"{s.fault}-{s.role}")
def test_every_step_round_trips(step: Step) -> None:
    rec = schedule_record.of_steps([step])
    data = schedule_record.encode(rec)
    assert schedule_record.decode(data) == rec
    (on_disk,) = json.loads(data)["steps"]
    assert list(on_disk) == ["gap_s", "fault", "hold_s", "role", "value", "waited",
                             *(["drawn_hold_s"] if step.drawn_hold_s is not None else [])]


def test_write_steps_and_load_steps_go_through_the_record(tmp_path: Path) -> None:
    path = tmp_path / "schedule.json"
    write_steps(path, STEPS)
    assert path.read_bytes() == schedule_record.encode(Schedule(steps=STEPS))
    assert load_steps(path, ["pause", "kill", "partition"]) == tuple(STEPS)
    assert [p.name for p in tmp_path.iterdir()] == ["schedule.json"]  # no temporary left


def test_a_value_json_has_no_type_for_is_written_as_its_text(tmp_path: Path) -> None:
    path = tmp_path / "schedule.json"
    write_steps(path, [Step(1.0, "pause", 1.0, "as named", {"at": Path("/x")})])
    assert load_steps(path)[0].value == {"at": "/x"}


@pytest.mark.parametrize("old", [
    # before drawn holds (every release so far wrote `format` 1, value and waited)
    {"format": 1, "steps": [{"gap_s": 0.5, "fault": "pause", "hold_s": 4.0, "role": "holder",
                             "value": {"targets": ["c1"]}, "waited": True}]},
    # integer seconds, as a hand-written file or a round number has them
    {"format": 1, "steps": [{"gap_s": 1, "fault": "pause", "hold_s": 2, "role": "holder",
                             "value": None, "waited": False}]},
    {"format": 1, "steps": []},
])
def test_schedules_of_earlier_releases_load(tmp_path: Path, old: dict[str, object]) -> None:
    path = tmp_path / "schedule.json"
    path.write_text(json.dumps(old, indent=2))
    steps = load_steps(path, ["pause"])
    assert [s.drawn_hold_s for s in steps] == [None] * len(steps)
    assert json.loads(schedule_record.encode(schedule_record.of_steps(steps))) == {
        "format": 1, "steps": [{**s, "gap_s": float(s["gap_s"]), "hold_s": float(s["hold_s"])}
                               for s in old["steps"]]}  # type: ignore[attr-defined]


@pytest.mark.parametrize(("text", "what"), [
    ('{"format": 1, "steps": [{"gap_s": "1", "fault": "pause", "hold_s": 1, "role": "holder"}]}',
     "s.json: steps[0].gap_s: expected `float`, got `str`"),
    ('{"format": 1, "steps": [{"gap_s": 1, "fault": "pause", "hold_s": -1, "role": "holder"}]}',
     "s.json: steps[0].hold_s: expected `float` >= 0.0"),
    ('{"format": 1, "steps": [{"gap_s": 1, "fault": "pause", "role": "holder"}]}',
     "s.json: steps[0]: object missing required field `hold_s`"),
    ('{"format": 2, "steps": []}', "s.json: format 2: this fencecheck reads schedules of format 1"),
    ('{"steps": []}', "s.json: format None"),
    ('{"format": 1}', "s.json: steps: missing"),
    ("[]", "s.json: expected a JSON object"),
    ("{", "s.json: not valid JSON"),
])
def test_a_wrong_schedule_is_named_in_one_line(tmp_path: Path, text: str, what: str) -> None:
    with pytest.raises(RecordError) as e:
        schedule_record.decode(text, "s.json")
    assert str(e.value).startswith(what), str(e.value)
    (tmp_path / "s.json").write_text(text)
    with pytest.raises(ScheduleError, match="not a fault schedule") as e2:
        load_steps(tmp_path / "s.json")
    assert "\n" not in str(e2.value)


def test_the_schema_is_generated_from_the_step() -> None:
    s = schedule_record.schema()
    step = s["$defs"]["Step"]
    assert step["required"] == ["gap_s", "fault", "hold_s", "role"]
    assert step["properties"]["hold_s"] == {"type": "number", "minimum": 0.0}
