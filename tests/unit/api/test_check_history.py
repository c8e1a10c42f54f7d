"""`fencecheck.api.check_history` gives the verdict `fencecheck check` gives, on every shipped
history, and `Result` presents it: valid True/False/None, incidents, violations, summary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fencecheck.api import CheckerError, Result, check_history
from tests.conftest import REPO

SHIPPED = sorted([*(REPO / "examples" / "histories").glob("*.jsonl"),
                  *(REPO / "tests" / "data" / "histories").glob("*.jsonl")])


def _judged(data: Any) -> Any:
    """results.json without what measures the checker's own speed (`elapsed_s`)."""
    if isinstance(data, dict):
        return {k: _judged(v) for k, v in data.items() if k != "elapsed_s"}
    if isinstance(data, list):
        return [_judged(v) for v in data]
    return data


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_same_verdict_as_the_command_line(path: Path) -> None:
    cli = subprocess.run([sys.executable, "-m", "fencecheck", "check", "--json", str(path)],
                         capture_output=True, text=True, timeout=300, check=False)
    result = check_history(path)
    assert cli.returncode == result.exit_code, cli.stderr
    assert _judged(json.loads(cli.stdout)) == _judged(result.to_json())
    assert result.valid is {0: True, 1: False, 2: None}[cli.returncode]


def test_shipped_histories_are_all_there() -> None:
    assert len(SHIPPED) >= 25  # a moved folder must not turn the test above into nothing


def test_a_planted_double_grant_is_one_incident_with_a_story() -> None:
    result = check_history(REPO / "tests" / "data" / "histories" / "double-grant.jsonl")
    assert result.valid is False
    assert [v["kind"] for v in result.violations] == ["double-grant"]
    assert result.violations[0]["check"] == "mutex"
    [incident] = result.incidents
    assert incident["kinds"] == ["double-grant"]
    assert f"incident 1: {incident['story']}" in result.summary()


def test_events_as_dicts_judge_like_the_file() -> None:
    path = REPO / "examples" / "histories" / "redis-unfenced.jsonl"
    events = [json.loads(line) for line in path.read_text().splitlines()]
    assert check_history(events).to_json() == check_history(path).to_json()


def test_a_run_folder_is_judged_by_its_history(tmp_path: Path) -> None:
    src = REPO / "examples" / "histories" / "etcd-fenced.jsonl"
    (tmp_path / "history.jsonl").write_bytes(src.read_bytes())
    result = check_history(tmp_path)
    assert isinstance(result, Result) and result.valid is True


def test_nothing_to_judge_is_unknown_not_valid() -> None:
    result = check_history([])
    assert result.valid is None and result.exit_code == 2
    assert result.summary().startswith("UNKNOWN")


def test_bad_input_names_the_line() -> None:
    bad = [{"index": 0, "time": 0, "process": 1, "type": "okay", "f": "acquire", "value": None}]
    with pytest.raises(CheckerError, match=r"^<events>:1: type\W+okay\W+is not one of"):
        check_history(bad)
    with pytest.raises(CheckerError, match="no such file"):
        check_history(REPO / "no-such-history.jsonl")


def test_max_drift_is_checked() -> None:
    with pytest.raises(CheckerError, match="max_drift"):
        check_history(SHIPPED[0], max_drift=1.5)
