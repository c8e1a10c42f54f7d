"""`fencecheck check` as a user meets it: exit codes, one-line errors, escaped output, run
directories rewritten safely, the schema command, and a command that imports only what it uses."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fencecheck.checker.schemas import schema
from tests.conftest import REPO, run_fencecheck

DATA = REPO / "tests" / "data"
MS = 1_000_000


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_fencecheck(*args, timeout=120)


def write(path: Path, rows: list[tuple[Any, ...]]) -> Path:
    with open(path, "w") as fh:
        for i, (t, p, typ, f, v) in enumerate(rows):
            fh.write(json.dumps({"index": i, "time": t, "process": p, "type": typ, "f": f,
                                 "value": v}) + "\n")
    return path


def double_grant(lock: str) -> list[tuple[Any, ...]]:
    return [(0, 0, "invoke", "acquire", {"lock": lock, "lease_ms": 10_000}),
            (1 * MS, 0, "ok", "acquire", {"token": 1}),
            (2 * MS, 1, "invoke", "acquire", {"lock": lock, "lease_ms": 10_000}),
            (3 * MS, 1, "ok", "acquire", {"token": 2})]


@pytest.mark.parametrize("argv", [
    ["check", "--bogus", "x"], ["check"], ["check", "--max-drift", "abc", "h.jsonl"],
    ["nosuch"], ["check", "--time-limit", "-1", str(DATA / "histories" / "double-grant.jsonl")],
    ["check", "--max-drift", "1.5", str(DATA / "histories" / "double-grant.jsonl")],
    ["check", "--model", "nosuch", str(DATA / "histories" / "double-grant.jsonl")],
    ["schema", "nosuch"],
])
def test_usage_errors_are_exit_3_with_one_line(argv: list[str]) -> None:
    res = run(*argv)
    assert res.returncode == 3, res
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), res.stderr
    assert "Traceback" not in res.stderr + res.stdout


def test_text_from_the_history_is_shown_not_obeyed(tmp_path: Path) -> None:
    lock = "[/x][bold]\x1b[2J\u202e"
    res = run("check", str(write(tmp_path / "h.jsonl", double_grant(lock))))
    assert res.returncode == 1, res.stderr
    assert "[/x][bold]" in res.stdout  # markup printed as text, not a rich error
    assert "\x1b" not in res.stdout and "\u202e" not in res.stdout
    assert "\\x1b[2J" in res.stdout and "\\u202e" in res.stdout
    assert "1 incident, 1 violation" in res.stdout


@pytest.mark.parametrize("rows", [
    [],
    [(0, "nemesis", "invoke", "start-pause", None), (MS, "nemesis", "ok", "start-pause", {})],
], ids=["empty", "nemesis-only"])
def test_an_empty_or_nemesis_only_history_is_unknown_with_the_reason(
        tmp_path: Path, rows: list[tuple[Any, ...]]) -> None:
    res = run("check", str(write(tmp_path / "h.jsonl", rows)))
    assert res.returncode == 2, res
    assert "no client operations" in res.stdout


@pytest.mark.parametrize("model", ["mutex", "register", None])
def test_a_model_never_makes_a_thin_history_valid(tmp_path: Path, model: str | None) -> None:
    # one acquire that failed: nothing any check or model can judge
    rows = [(0, 0, "invoke", "acquire", {"lock": "l", "lease_ms": None}),
            (MS, 0, "fail", "acquire", None)]
    args = ["check", str(write(tmp_path / "h.jsonl", rows))]
    res = run(*args, *(["--model", model] if model else []))
    assert res.returncode == 2, res.stdout + res.stderr


def test_check_of_a_run_directory_rewrites_results_and_report_together(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(DATA / "runs" / "violations", run_dir)
    (run_dir / "results.json").write_text('{"valid": true}\n')  # stale
    outside = tmp_path / "outside.html"
    outside.write_text("not ours")
    (run_dir / "report.html").symlink_to(outside)  # replaced, never written through
    res = run("check", str(run_dir))
    assert res.returncode == 1, res.stderr
    results = json.loads((run_dir / "results.json").read_text())
    assert results["valid"] is False and results["format_version"] == 1
    report = run_dir / "report.html"
    assert outside.read_text() == "not ours"
    assert report.is_file() and not report.is_symlink()
    assert "stale-write-accepted" in report.read_text()


def test_a_history_linked_out_of_the_run_directory_is_not_followed(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(DATA / "runs" / "violations", run_dir)
    elsewhere = tmp_path / "elsewhere.jsonl"
    (run_dir / "history.jsonl").rename(elsewhere)
    (run_dir / "history.jsonl").symlink_to(elsewhere)
    before = (run_dir / "results.json").read_text()
    res = run("check", str(run_dir))
    assert res.returncode == 3 and "link out of the run directory" in res.stderr, res
    assert (run_dir / "results.json").read_text() == before


@pytest.mark.parametrize("name", ["results", "test", "matrix", "history"])
def test_schema_prints_the_shipped_schema(name: str) -> None:
    res = run("schema", name)
    assert res.returncode == 0
    assert json.loads(res.stdout) == json.loads(json.dumps(schema(name)))


def test_check_imports_nothing_it_does_not_use() -> None:
    heavy = ("jinja2", "pydantic", "plotly", "pandas", "fencecheck.run.wiring",
             "fencecheck.fleet.matrix", "fencecheck.reports.html", "fencecheck.clusters.base")
    code = (
        "import sys\n"
        "from fencecheck.cli.app import main\n"
        f"sys.argv = ['fencecheck', 'check', {str(DATA / 'histories' / 'double-grant.jsonl')!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        f"print([m for m in {heavy!r} if m in sys.modules])\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.stdout.strip().splitlines()[-1] == "[]", res.stdout + res.stderr


def test_no_command_ends_in_a_traceback(tmp_path: Path) -> None:
    # a path that is rich markup once made `report` crash while printing its error
    res = run("report", str(tmp_path / "[/x]"))
    assert res.returncode == 3, res
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
