"""test.json through its record: the shipped run folders and a file the controller writes
decode and encode back to every field, the written one is what replay reads, and a field of the
wrong type is one line naming the file and the field (exit 3 where the user gave the file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from msgspec import UNSET

from fencecheck.nemesis.replay import replay_config
from fencecheck.records import test as test_record
from fencecheck.records.base import RecordError
from fencecheck.records.test import TEST_FORMAT, RunSettings, TestRecord
from tests.conftest import run_fencecheck
from tests.unit.records.conftest import RUNS


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_a_shipped_test_json_keeps_every_field(run: Path) -> None:
    path = run / "test.json"
    rec = test_record.read(path)
    assert json.loads(test_record.encode(rec)) == json.loads(path.read_text())
    assert test_record.decode(test_record.encode(rec)) == rec


def test_the_controllers_test_json_keeps_every_field_and_replays(written_run: Path,
                                                                  tmp_path: Path) -> None:
    path = written_run / "test.json"
    on_disk = json.loads(path.read_text())
    rec = test_record.read(path)
    assert json.loads(test_record.encode(rec)) == on_disk
    # the fields earlier releases wrote, and no version while it is 1
    assert list(on_disk) == ["run_id", "name", "started", "config", "seed", "versions",
                             "duration_s", "exit_code", "ready_s", "interrupted"]
    assert rec.format_version is UNSET and TEST_FORMAT == 1
    assert rec.settings.concurrency == 2 and rec.settings.nemesis == ["pause"]
    assert rec.exit_code in (0, 1, 2) and isinstance(rec.duration_s, float)
    assert (written_run / "schedule.json").is_file()
    cfg = replay_config(written_run, tmp_path)
    assert cfg.concurrency == 2 and cfg.nemesis == ("pause",) and cfg.store == tmp_path


def test_a_test_json_of_few_fields_still_loads() -> None:
    rec = test_record.decode('{"config": {"backend": "redis"}}')
    assert rec == TestRecord(config={"backend": "redis"})
    assert rec.settings.backend == "redis" and rec.run_seed is UNSET
    assert test_record.encode(rec) == b'{\n  "config": {\n    "backend": "redis"\n  }\n}\n'


@pytest.mark.parametrize(("text", "named"), [
    ('{"run_id": 7, "config": {}}', "x/test.json: run_id: expected `str`, got `int`"),
    ('{"config": {"fencing": "on"}}', "x/test.json: config.fencing: expected `bool`, got `str`"),
    ('{"config": {"nemesis": "pause"}}', "x/test.json: config.nemesis: expected `array`"),
    ('{"config": [], "run_id": "a"}', "x/test.json: config: expected `object`, got `array`"),
    ('{"config": {}, "exit_code": 1.5}', "x/test.json: exit_code: expected `int`, got `float`"),
    ('{"format_version": 2}', "x/test.json: format_version 2: this fencecheck reads format 1"),
    ('[1]', "x/test.json: expected a JSON object, got list"),
    ('{"run_id": ', "x/test.json: not valid JSON"),
])
def test_a_bad_field_is_named(text: str, named: str) -> None:
    with pytest.raises(RecordError) as e:
        test_record.decode(text, "x/test.json")
    assert str(e.value).startswith(named) and "\n" not in str(e.value)


def test_the_schema_is_generated_from_the_record() -> None:
    s = test_record.schema()
    props = s["$defs"]["TestRecord"]["properties"]
    assert {"run_id", "config", "duration_s", "exit_code"} <= set(props)
    assert props["exit_code"] == {"type": "integer"}


def test_replay_of_a_test_json_with_a_bad_field_is_exit_3(tmp_path: Path) -> None:
    (tmp_path / "test.json").write_text(json.dumps({"config": {"fencing": "on"}}))
    (tmp_path / "schedule.json").write_text('{"format": 1, "steps": []}')
    r = run_fencecheck("run", "--replay", str(tmp_path), "--store", str(tmp_path / "s"),
                       timeout=60)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "config.fencing: expected `bool`, got `str`" in r.stderr
    assert "Traceback" not in r.stderr


def test_the_settings_readers_interpret_are_fields_of_run_config() -> None:
    from fencecheck.run.config import RunConfig

    assert set(RunSettings.__struct_fields__) <= set(RunConfig.model_fields)
