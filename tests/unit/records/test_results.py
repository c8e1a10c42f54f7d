"""results.json through its record: every shipped results.json, the results of every shipped
history and the file the controller writes decode and encode back to every field (a check's and
a violation's own fields included), the schema generated from the record validates them, and a
field of the wrong type is one line naming the check and the field (exit 3 where the user gave
the file)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from msgspec import UNSET

from fencecheck.checker.verdict import check_history
from fencecheck.records import results as results_record
from fencecheck.records.base import RecordError
from fencecheck.records.results import RESULTS_FORMAT, Results
from tests.conftest import REPO, run_fencecheck
from tests.unit.records.conftest import DATA, RUNS

HISTORIES = sorted((DATA / "histories").glob("*.jsonl")) + sorted(
    (REPO / "examples").rglob("*.jsonl"))
SCHEMA = Draft202012Validator(results_record.schema())


def _round_trip(doc: dict[str, Any]) -> Results:
    rec = results_record.from_document(doc)
    assert json.loads(results_record.encode(rec)) == doc
    assert results_record.decode(results_record.encode(rec)) == rec
    assert list(SCHEMA.iter_errors(doc)) == []
    return rec


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_a_shipped_results_json_keeps_every_field(run: Path) -> None:
    rec = _round_trip(json.loads((run / "results.json").read_text()))
    assert rec.format_version == RESULTS_FORMAT


def test_the_linearizable_counterexample_stays_beside_the_common_fields() -> None:
    rec = results_record.read(DATA / "runs" / "violations" / "results.json")
    (v,) = rec.checks["linearizable"].violations
    assert v.kind == "not-linearizable" and set(v.extra) == {"prefix", "op"}
    assert rec.checks["linearizable"].extra == {"model": "mutex"}
    assert rec.checks["mutex"].extra["grants"] > 0 and rec.checks["mutex"].count_by_kind
    assert rec.incidents[0].stale_grant.surely_held_end_ns is not None


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
def test_the_checkers_results_keep_every_field(path: Path) -> None:
    results = check_history(path)
    rec = _round_trip(json.loads(json.dumps(results.to_json())))
    assert rec == results.record()


def test_the_controllers_results_json_keeps_every_field(written_run: Path) -> None:
    rec = _round_trip(json.loads((written_run / "results.json").read_text()))
    assert rec.tool_version and set(rec.checks) >= {"mutex", "fencing"}


def test_a_results_json_of_few_fields_still_loads() -> None:
    rec = results_record.decode('{"checks": {"c": {"violations": [{"kind": "x"}]}}}')
    assert rec.valid == "unknown" and rec.kinds() == {"x"}  # no verdict: not a pass
    assert rec.checks["c"].violation_count == 1 and rec.first_violation_ns is None


def _doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / "runs" / "violations" / "results.json").read_text())
    return doc


@pytest.mark.parametrize(("path", "value", "named"), [
    (("checks", "mutex", "violations", 0, "ops", 0, "token"), "7",
     "checks.mutex.violations[0].ops[0].token: expected `int | null`, got `str`"),
    (("checks", "fencing", "valid"), "yes", "checks.fencing.valid: invalid enum value 'yes'"),
    (("checks", "mutex", "count"), -1, "checks.mutex.count: expected `int` >= 0"),
    (("incidents", 0, "stale_grant", "index"), "3",
     "incidents[0].stale_grant.index: expected `int`, got `str`"),
    (("format_version",), 2, "format_version 2: this fencecheck reads format 1"),
    (("checks",), [], "checks: expected `object`, got `list`"),
])
def test_a_bad_field_is_named(path: tuple[Any, ...], value: Any, named: str) -> None:
    doc = _doc()
    at: Any = doc
    for key in path[:-1]:
        at = at[key]
    at[path[-1]] = value
    with pytest.raises(RecordError) as e:
        results_record.decode(json.dumps(doc), "run/results.json")
    assert str(e.value).startswith(f"run/results.json: {named}"), str(e.value)


def test_a_report_of_a_results_json_with_a_bad_field_is_exit_3(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(DATA / "runs" / "violations", run)
    doc = _doc()
    doc["checks"]["mutex"]["violations"][0]["kind"] = 5
    (run / "results.json").write_text(json.dumps(doc))
    r = run_fencecheck("report", str(run), timeout=60)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "checks.mutex.violations[0].kind: expected `str`, got `int`" in r.stderr
    assert "Traceback" not in r.stderr


# Format 0: results.json before it had a version (tests/data/runs/*/results.json at c1aef61).
FORMAT_0 = sorted((DATA / "records").glob("results-format0-*.json"))


@pytest.mark.parametrize("path", FORMAT_0, ids=lambda p: p.stem)
def test_a_format_0_results_json_loads_as_format_1(path: Path) -> None:
    old = json.loads(path.read_text())
    assert "format_version" not in old
    rec = results_record.read(path)
    assert rec.format_version == RESULTS_FORMAT and rec.valid == old["valid"]
    for name, check in old["checks"].items():
        got = rec.checks[name]
        assert got.valid == check["valid"] and len(got.violations) == len(check["violations"])
        for v, was in zip(got.violations, check["violations"], strict=True):
            assert v.kind == was["kind"] and v.explanation == was["explanation"]
            assert [o.time_ns for o in v.ops] == [o["time"] for o in was["ops"]]
            assert v.time_ns == was.get("time", UNSET)
    upgraded = json.loads(results_record.encode(rec))
    assert list(SCHEMA.iter_errors(upgraded)) == []  # written back, it is a format 1 file
    assert results_record.decode(results_record.encode(rec)) == rec


def test_a_report_of_a_format_0_run_folder_shows_its_violations(tmp_path: Path) -> None:
    from fencecheck.reports.html import write_report

    run = tmp_path / "run"
    shutil.copytree(DATA / "runs" / "violations", run)
    shutil.copy(DATA / "records" / "results-format0-violations.json", run / "results.json")
    page = write_report(run).read_text()
    assert "double-grant" in page and "stale-write-accepted" in page
    assert "3.3050 s" in page  # the double grant's time, format 0's `time` of the violation
