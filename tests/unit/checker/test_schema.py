"""Every results.json and history the tool produces validates against the shipped JSON Schemas
(`fencecheck schema results|history`), and the schemas refuse what the contract forbids."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from fencecheck.checker.schemas import schema
from fencecheck.checker.verdict import check_history
from tests.conftest import REPO

DATA = REPO / "tests" / "data"
HISTORIES = sorted((DATA / "histories").glob("*.jsonl"))
RUNS = sorted(p.parent for p in (DATA / "runs").glob("*/results.json"))
EXAMPLES = sorted((REPO / "examples").rglob("*.jsonl"))


def validator(name: str) -> Draft202012Validator:
    s = schema(name)
    Draft202012Validator.check_schema(s)
    return Draft202012Validator(s)


RESULTS = validator("results")
LINE = validator("history")


def errors(v: Draft202012Validator, doc: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(doc)]


@pytest.mark.parametrize("path", HISTORIES + EXAMPLES, ids=lambda p: p.stem)
def test_results_of_every_shipped_history_validate(path: Path) -> None:
    results = json.loads(json.dumps(check_history(path).to_json()))
    assert errors(RESULTS, results) == []


@pytest.mark.parametrize("path", HISTORIES + EXAMPLES + [r / "history.jsonl" for r in RUNS],
                         ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_shipped_history_line_validates(path: Path) -> None:
    for n, line in enumerate(path.read_text().splitlines(), 1):
        assert errors(LINE, json.loads(line)) == [], f"{path}:{n}"


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_the_shipped_run_directories_results_validate(run: Path) -> None:
    assert errors(RESULTS, json.loads((run / "results.json").read_text())) == []


def test_incidents_carry_what_the_contract_names() -> None:
    results = check_history(DATA / "runs" / "violations" / "history.jsonl").to_json()
    assert results["format_version"] == 1 and results["tool_version"]
    assert [i["id"] for i in results["incidents"]] == list(range(1, len(results["incidents"]) + 1))
    for inc in results["incidents"]:
        for ref in inc["violations"]:
            v = results["checks"][ref["check"]]["violations"][ref["n"]]
            assert v["incident"] == inc["id"]
            assert v["kind"] in inc["kinds"]
    first = results["incidents"][0]
    assert first["fault"]["f"] == "pause" and first["next_grant"]["process"] == 1
    assert "pause" in first["story"] and "\n" not in first["story"]


@pytest.mark.parametrize(("doc", "why"), [
    ({"index": 0, "time": -1, "process": 0, "type": "invoke", "f": "read"}, "negative time"),
    ({"index": 0, "time": 1, "process": "p1", "type": "invoke", "f": "read"}, "process name"),
    ({"index": 0, "time": 1, "process": 0, "type": "done", "f": "read"}, "type"),
    ({"index": 0, "time": 1, "process": 0, "type": "invoke", "f": "acquire",
      "value": {"lease_ms": 5}}, "acquire without lock"),
    ({"index": 0, "time": 1, "process": 0, "type": "ok", "f": "acquire",
      "value": {"token": "7"}}, "token of the wrong type"),
])
def test_the_line_schema_refuses_what_the_reader_refuses(doc: dict[str, Any], why: str) -> None:
    assert errors(LINE, doc), why


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_the_shipped_run_directories_test_json_validates(run: Path) -> None:
    assert errors(validator("test"), json.loads((run / "test.json").read_text())) == []


@pytest.mark.parametrize(("name", "doc"), [
    ("results", {"valid": "yes"}),
    ("results", {"checks": {"mutex": {"violations": [{"kind": "x", "ops": [{"token": 1}]}]}}}),
    ("test", {"config": {}, "exit_code": "1"}),
    ("matrix", {"rows": [{"row": "r", "expect": "must-find", "met": 1, "runs": []}]}),
])
def test_the_record_schemas_refuse_what_the_records_refuse(name: str, doc: Any) -> None:
    assert errors(validator(name), doc)
