"""fencecheck.cmd_reports: the report, compare and serve commands (a Typer app of their own, so
the tests do not depend on how the main CLI wires them)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from fencecheck.cmd_reports import register
from tests.reports.conftest import copy_run


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer(pretty_exceptions_enable=False)
    register(app)
    return app


def run(app: typer.Typer, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_report_writes_the_page(app: typer.Typer, tmp_path: Path) -> None:
    d = copy_run("violations", tmp_path / "run")
    code, out, _ = run(app, "report", str(d))
    assert code == 0 and out.strip() == str(d.resolve() / "report.html")
    assert (d / "report.html").is_file()


def test_compare_writes_html_csv_and_junit(app: typer.Typer, store: Path, tmp_path: Path) -> None:
    code, out, _ = run(
        app, "compare", str(store), "--out", str(tmp_path / "o"), "--junit", str(tmp_path / "j.xml")
    )
    assert code == 0
    o = tmp_path / "o"
    assert out.split() == [str(o / "compare.html"), str(o / "compare.csv"), str(tmp_path / "j.xml")]
    assert (tmp_path / "j.xml").read_text().count("<testcase") == 3


def _bad_history(tmp_path: Path) -> Path:
    d = copy_run("fenced", tmp_path / "bad")
    (d / "history.jsonl").write_text('{"index": 0}\n')
    return d


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["report", "{tmp}/missing"], "not a directory"),
        (["report", "{tmp}"], "not a run directory"),
        (["report", "{bad}"], "history.jsonl:1: "),
        (["compare", "{tmp}/missing"], "no such file"),
        (["compare", "{tmp}"], "no run directories"),
        (["serve", "{tmp}/missing"], "not a directory"),
    ],
)
def test_bad_input_is_one_line_and_exit_3(
    app: typer.Typer, tmp_path: Path, argv: list[str], message: str
) -> None:
    (tmp_path / "empty").mkdir()
    bad = _bad_history(tmp_path / "x")
    args = [a.format(tmp=tmp_path / "empty", bad=bad) for a in argv]
    code, out, err = run(app, *args)
    assert code == 3
    assert len(err.strip().splitlines()) == 1 and message in err
    assert "Traceback" not in out + err


def test_serve_on_a_busy_port_is_one_line(app: typer.Typer, store: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code, _, err = run(app, "serve", str(store), "--port", str(port))
    assert code == 3 and "already in use" in err
