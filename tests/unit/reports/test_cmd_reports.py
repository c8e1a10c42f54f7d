"""fencecheck.cli.reports: the report, compare and serve commands (a Typer app of their own, so
the tests do not depend on how the main CLI wires them)."""

from __future__ import annotations

import socket
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from fencecheck.cli.reports import register
from fencecheck.reports.junit import MAX_CHARS, MAX_LINES, Case, failure_text
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


def test_compare_expectations_make_an_expected_finding_pass_in_junit(
    app: typer.Typer, store: Path, tmp_path: Path
) -> None:
    code, _, err = run(app, "compare", str(store), "--out", str(tmp_path / "o"),
                       "--junit", str(tmp_path / "j.xml"),
                       "--expect", "redis-unfenced-pause=must-find")
    assert code == 0, err
    suite = ET.parse(tmp_path / "j.xml").getroot().find("testsuite")
    assert suite is not None
    cases = {c.get("classname"): c for c in suite.iter("testcase")}
    redis = cases["redis-unfenced-pause"]
    assert redis.get("name") == "seed 42"  # stable across nights: no timestamp
    assert redis.find("failure") is None and redis.find("error") is None
    props = {p.get("name"): p.get("value") for p in redis.iter("property")}
    assert props["seed"] == "42" and props["expect"] == "must-find"
    assert props["version.redis-server"] == "7.0.15"
    assert props["run_dir"].endswith("20261129T230000")
    assert cases["<img src=x onerror=window.fcPwned=5>"].find("failure") is not None
    assert "found as expected" in (tmp_path / "o" / "compare.html").read_text()


def test_check_junit_for_a_run_folder_and_a_bare_history(app: typer.Typer, tmp_path: Path) -> None:
    from fencecheck.cli.app import app as cli

    d = copy_run("violations", tmp_path / "run")
    for source, xml in ((d, tmp_path / "run.xml"), (d / "history.jsonl", tmp_path / "h.xml")):
        result = CliRunner().invoke(cli, ["check", str(source), "--junit", str(xml)])
        assert result.exit_code == 1, result.output
        case = ET.parse(xml).getroot().find("testsuite/testcase")
        assert case is not None
        failure = case.find("failure")
        assert failure is not None and "[stale-write-accepted]" in (failure.text or "")
    assert ET.parse(tmp_path / "run.xml").getroot().find(
        "testsuite/testcase").get("classname") == "redis-unfenced-pause"  # type: ignore[union-attr]


def test_junit_failure_text_is_capped() -> None:
    case = Case("t", "seed 1", "invalid", violations=tuple(f"[x] v{i}" for i in range(500)),
                counts=(("x", 1200),), where="r.html")
    text = failure_text(case)
    assert text.count("\n[x]") == MAX_LINES - 1 and len(text) <= MAX_CHARS + 200
    assert "… and 1160 more violations" in text and text.endswith("report: r.html")


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
        (["compare", "{tmp}", "--expect", "x=maybe"], "--expect: expected TEST=must-find"),
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
