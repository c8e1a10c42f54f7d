"""Output that pipes: piped through `cat`, `check`, `report`, `compare` and `run` print each line
whole whatever $COLUMNS says (40 or 200), so a printed path can be opened (`open "$(fencecheck
report DIR)"`) and a summary line read by a program."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO, at_once, fencecheck_argv, run_cmd

RUNS = REPO / "tests" / "data" / "runs"
WIDTHS = (40, 200)


@pytest.fixture
def deep(tmp_path: Path) -> Path:
    """A folder whose path alone is wider than the narrowest terminal tried."""
    d = tmp_path / ("a-folder-name-wider-than-forty-columns-" * 2).rstrip("-") / "and-one-more"
    d.mkdir(parents=True)
    assert len(str(d)) > max(WIDTHS) // 2
    return d


def _piped(*args: str, columns: int, timeout: float = 120) -> tuple[int, list[str], list[str]]:
    """`fencecheck ARGS | cat` (the exit status of fencecheck, as `set -o pipefail` gives it)."""
    env = {**os.environ, "COLUMNS": str(columns)}
    env.pop("FORCE_COLOR", None)
    script = 'set -o pipefail; "$@" | cat'
    r = run_cmd(["bash", "-c", script, "fencecheck", *fencecheck_argv(*args)], timeout=timeout,
                env=env)
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


def test_compare_prints_each_written_path_whole(deep: Path) -> None:
    run = deep / "store" / "redis-unfenced-pause" / "20261129T230000"
    shutil.copytree(RUNS / "violations", run)

    def one(columns: int) -> tuple[int, list[str], list[str]]:
        out_dir = deep / f"compare-{columns}"
        return _piped("compare", str(deep / "store"), "--out", str(out_dir), "--junit",
                      str(out_dir / "junit.xml"), columns=columns)

    results = at_once(*(lambda c=c: one(c) for c in WIDTHS))
    for columns, (code, out, err) in zip(WIDTHS, results, strict=True):
        out_dir = deep / f"compare-{columns}"
        assert code == 0, err
        assert out == [str(out_dir / "compare.html"), str(out_dir / "compare.csv"),
                       str(out_dir / "junit.xml")], f"COLUMNS={columns}: {out}"


@pytest.mark.netns
def test_run_prints_its_directory_and_report_whole(deep: Path) -> None:
    def one(columns: int) -> tuple[int, list[str], list[str]]:
        return _piped("run", "--nemesis", "none", "--time-limit", "2", "--concurrency", "2",
                      "--store", str(deep / f"store-{columns}"), columns=columns, timeout=300)

    for columns, (code, out, err) in zip(WIDTHS, at_once(*(lambda c=c: one(c) for c in WIDTHS)),
                                         strict=True):
        assert code == 0, (out, err)
        [run_dir] = [line.removeprefix("run directory: ") for line in out
                     if line.startswith("run directory: ")]
        [report] = [line.removeprefix("report:        ") for line in out
                    if line.startswith("report:        ")]
        assert Path(run_dir).is_dir() and Path(report) == Path(run_dir) / "report.html", out
        assert run_dir.startswith(str(deep / f"store-{columns}"))
