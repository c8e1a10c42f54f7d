"""Output that pipes: with stdout a pipe, `check` and `report` print each line whole whatever
$COLUMNS says, so a printed path can be opened (`open "$(fencecheck report DIR)"`) and a summary
line read by a program."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO, run_fencecheck

RUNS = REPO / "tests" / "data" / "runs"
WIDTHS = (40, 200)


@pytest.fixture
def deep(tmp_path: Path) -> Path:
    """A folder whose path alone is wider than the narrowest terminal tried."""
    d = tmp_path / ("a-folder-name-wider-than-forty-columns-" * 2).rstrip("-") / "and-one-more"
    d.mkdir(parents=True)
    assert len(str(d)) > max(WIDTHS) // 2
    return d


def _piped(*args: str, columns: int) -> tuple[int, list[str], list[str]]:
    env = {**os.environ, "COLUMNS": str(columns)}
    env.pop("FORCE_COLOR", None)
    r = run_fencecheck(*args, timeout=120, env=env)
    return r.returncode, r.stdout.splitlines(), r.stderr.splitlines()


def test_report_prints_the_page_path_whole(deep: Path) -> None:
    run = deep / "run"
    shutil.copytree(RUNS / "violations", run)
    for columns in WIDTHS:
        code, out, err = _piped("report", str(run), columns=columns)
        assert code == 0, err
        assert out == [str(run / "report.html")], f"COLUMNS={columns}: {out}"


def test_check_summary_lines_do_not_depend_on_columns(deep: Path) -> None:
    run = deep / "run"
    shutil.copytree(RUNS / "violations", run)
    history = deep / "redis-unfenced.jsonl"
    shutil.copy(REPO / "examples" / "histories" / "redis-unfenced.jsonl", history)
    for target in (run, history):
        (code40, out40, _), (code200, out200, _) = (_piped("check", str(target), columns=c)
                                                     for c in WIDTHS)
        assert code40 == code200 == 1
        assert out40 == out200, f"{target}: the output changed with COLUMNS"
        assert "  fencing       violated — 1 violation(s)" in out40 or \
            "  fencing       violated — 2 violation(s)" in out40
        # the lines wider than either width: each incident's story and each violation, whole
        assert any(line.startswith("  incident 1: ") and line.endswith(".") and len(line) > 200
                   for line in out40)


def test_an_error_naming_a_path_prints_it_whole(deep: Path) -> None:
    missing = deep / "no-such-history.jsonl"
    for columns in WIDTHS:
        code, out, err = _piped("check", str(missing), columns=columns)
        assert code == 3 and not out
        assert err == [f"error: {missing}: no such file"], f"COLUMNS={columns}: {err}"
