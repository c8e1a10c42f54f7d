"""fencecheck.fleet.matrix and the `matrix` command: a bad row is refused before anything runs
(exit 3,
one line naming file, row and field); JUnit and exit codes follow the rows' expectations; and end
to end, a tiny matrix of short redis runs on the netns runtime."""

from __future__ import annotations

import json
import os
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fencecheck.cli.app import app
from fencecheck.fleet.matrix import (
    MatrixError,
    MatrixOutcome,
    Row,
    RowResult,
    RunRecord,
    load_matrix,
)
from fencecheck.fleet.outputs import write_junit
from tests.conftest import processes_matching, run_fencecheck, wait_for_late_builds

GOOD_ROW = 'name = "ok"\nbackend = "redis"\nexpect = "must-pass"\n'


def matrix_file(tmp_path: Path, text: str, name: str = "m.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize(
    ("row", "ref", "field"),
    [
        ('name = "a"\nexpect = "must-pass"\ncolour = "red"', "row 'a' (#2)", "colour"),
        ('name = "a"\nexpect = "must-pass"\nbackend = "mongodb"', "row 'a' (#2)", "backend"),
        ('name = "a"\nexpect = "maybe"', "row 'a' (#2)", "expect"),
        ('name = "a"\nexpect = "must-find"\nseeds = []', "row 'a' (#2)", "seeds"),
        ('expect = "must-find"\nseeds = [1, 1]', "row #2", "seeds"),
        ('name = "b"\nbackend = "redis"', "row 'b' (#2)", "expect"),
        ('name = "a"\nexpect = "must-pass"\nseed = 3', "row 'a' (#2)", "seed"),
        ('name = "a"\nexpect = "must-pass"\nstore = "/tmp"', "row 'a' (#2)", "store"),
        ('name = "a"\nexpect = "must-pass"\nnemesis = "pause,meteor"', "row 'a' (#2)",
         "nemesis"),
        ('name = "a"\nexpect = "must-pass"\nclient = "zookeeper"', "row 'a' (#2)", "client"),
        ('name = "a"\nexpect = "must-pass"\ntime_limit_s = 0', "row 'a' (#2)", "time_limit_s"),
        ('name = "ok"\nexpect = "must-pass"', "row 'ok' (#2)", "name"),
        ('name = "a/b"\nexpect = "must-pass"', "row 'a/b' (#2)", "name"),
    ],
)
def test_bad_row_exits_3_naming_file_row_and_field(
    tmp_path: Path, row: str, ref: str, field: str
) -> None:
    path = matrix_file(tmp_path, f"[[row]]\n{GOOD_ROW}\n[[row]]\n{row}\n")
    store = tmp_path / "store"
    code, out, err = invoke("matrix", str(path), "--store", str(store))
    assert code == 3, out + err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    assert str(path) in lines[0] and ref in lines[0] and f"{field}:" in lines[0], lines[0]
    assert not store.exists()  # refused before anything ran
    assert out == ""


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[[row]]\nname = \n", "not valid TOML"),
        ("", "no rows"),
        ('[runs]\nx = 1\n[[row]]\n' + GOOD_ROW, "top-level key 'runs'"),
        ('[defaults]\nname = "x"\n[[row]]\n' + GOOD_ROW, "defaults: name"),
        ('[defaults]\nlease_ms = -5\n[[row]]\n' + GOOD_ROW, "row 'ok' (#1): lease_ms:"),
    ],
)
def test_bad_file_exits_3(tmp_path: Path, text: str, needle: str) -> None:
    path = matrix_file(tmp_path, text)
    code, _, err = invoke("matrix", str(path), "--store", str(tmp_path / "store"))
    assert code == 3 and needle in err and str(path) in err, err


def test_missing_file_and_unknown_only_exit_3(tmp_path: Path) -> None:
    code, _, err = invoke("matrix", str(tmp_path / "nope.toml"))
    assert code == 3 and "cannot read" in err
    path = matrix_file(tmp_path, f"[[row]]\n{GOOD_ROW}")
    code, _, err = invoke("matrix", str(path), "--only", "ok,ghost")
    assert code == 3 and "--only" in err and "'ghost'" in err, err


def test_only_refuses_an_unbuilt_client_in_its_own_rows_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A row left out by --only is read, not readied: another row's unbuilt client program (as
    a plugin's shipped client is, in `fencecheck libraries` output) does not refuse it."""
    monkeypatch.setenv("FENCECHECK_CLIENT_CACHE", str(tmp_path / "empty-cache"))
    path = matrix_file(tmp_path, f'[[row]]\n{GOOD_ROW}\n[[row]]\nname = "go"\n'
                       'backend = "redlock"\nclient = "go-redsync"\nexpect = "must-pass"\n')
    assert [r.label for r in load_matrix(path, tmp_path / "s", ["ok"]).rows] == ["ok"]
    with pytest.raises(MatrixError, match=r"row .go. \(#2\): client: .*build go-redsync"):
        load_matrix(path, tmp_path / "s", ["go"])
    with pytest.raises(MatrixError, match="not built"):
        load_matrix(path, tmp_path / "s")


def test_bad_row_through_the_real_cli_has_no_traceback(tmp_path: Path) -> None:
    path = matrix_file(tmp_path, '[[row]]\nname = "x"\nbackend = "mongodb"\nexpect = "must-find"')
    r = run_fencecheck("matrix", str(path), "--store", str(tmp_path / "s"), timeout=60)
    assert r.returncode == 3 and "Traceback" not in r.stderr
    assert "row 'x' (#1): backend:" in r.stderr


def test_load_merges_defaults_splits_nemesis_and_filters(tmp_path: Path) -> None:
    path = matrix_file(tmp_path, """
[defaults]
backend = "etcd"
time_limit_s = 7
lease_ms = 1500

[[row]]
name = "fenced"
nemesis = "pause, partition,kill"
fencing = "on"
seeds = [3, 4]
expect = "must-pass"

[[row]]
backend = "redis"
nemesis = ["none"]
expect = "must-pass"
timeout_s = 60
""")
    m = load_matrix(path, tmp_path / "store")
    a, b = m.rows
    assert (a.label, a.seeds, a.expect) == ("fenced", (3, 4), "must-pass")
    assert [c.seed for c in a.configs] == [3, 4]
    assert a.configs[0].nemesis == ("pause", "partition", "kill")
    assert a.configs[0].fencing is True and a.configs[0].backend == "etcd"
    assert a.configs[0].test_name == "fenced" and a.configs[0].lease_ms == 1500
    assert a.timeout_s > 7  # the time limit plus setup and teardown
    assert (b.label, b.seeds, b.timeout_s) == ("#2", (0,), 60)
    assert b.configs[0].backend == "redis" and b.configs[0].store == tmp_path / "store"
    only = load_matrix(path, tmp_path / "store", ["fenced"])
    assert [r.label for r in only.rows] == ["fenced"]
    typo = matrix_file(tmp_path, '[[row]]\nexpect = "must-pass"\ntime-limit = 5\n', "t.toml")
    with pytest.raises(MatrixError, match=r"time-limit: unknown field .*did you mean time_limit_s"):
        load_matrix(typo, tmp_path / "store")
    with pytest.raises(MatrixError, match="no row named 'ghost'"):
        load_matrix(path, tmp_path / "store", ["fenced,ghost"])


def test_the_nightly_example_is_valid(tmp_path: Path) -> None:
    path = Path(__file__).resolve().parents[2] / "examples" / "nightly.toml"
    wait_for_late_builds()  # runnable: its consul rows need the binary the late build makes
    m = load_matrix(path, tmp_path / "store")
    expects = {r.label: r.expect for r in m.rows}
    assert "must-find" in expects.values() and "must-pass" in expects.values()
    backends = {r.configs[0].backend for r in m.rows}
    assert backends == {"redis", "redlock", "redis-sentinel", "etcd", "zookeeper",
                        "postgres-advisory", "mariadb", "galera", "kubernetes", "nats",
                        "hazelcast", "hazelcast-unsafe", "consul"}


def _row(label: str, expect: str, seeds: tuple[int, ...]) -> Row:
    return Row(1, label, expect, seeds, (), 60.0)  # type: ignore[arg-type]


def _rec(seed: int, code: int, verdict: str) -> RunRecord:
    judged = verdict in ("valid", "invalid", "unknown")
    return RunRecord(seed, code, verdict, None, None, 1.5, None if judged else "boom")


def test_junit_and_exit_code_follow_expectations(tmp_path: Path) -> None:
    results = (
        RowResult(_row("finds", "must-find", (1, 2)), (_rec(1, 1, "invalid"), _rec(2, 1,
                                                                                    "invalid"))),
        RowResult(_row("passes", "must-pass", (0,)), (_rec(0, 0, "valid"),)),
        RowResult(_row("wrong", "must-pass", (0,)), (_rec(0, 1, "invalid"),)),
        RowResult(_row("broken", "must-find", (0, 1)), (_rec(0, 3, "error"),)),  # seed 1 not run
        # A traceback exits 1 as well: it must not pass for "violations found".
        RowResult(_row("crashed", "must-find", (0,)), (_rec(0, 1, "crashed"),)),
    )
    assert [r.met for r in results] == [True, True, False, False, False]
    outcome = MatrixOutcome(results, tmp_path, None, None, None, None)
    assert outcome.exit_code == 1
    assert [r.row.label for r in outcome.missed] == ["wrong", "broken", "crashed"]
    assert MatrixOutcome(results[:2], tmp_path, None, None, None, None).exit_code == 0
    assert MatrixOutcome(results[:2], tmp_path, None, None, None, 2).exit_code == 130
    assert MatrixOutcome(results[:2], tmp_path, None, None, None, None, "j: EACCES").exit_code == 3

    path = tmp_path / "j.xml"
    write_junit(results, path, "nightly")
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("7", "1", "3")
    cases = {(c.get("classname"), c.get("name")): c for c in suite.iter("testcase")}
    assert cases[("finds", "seed 1")].find("failure") is None  # found, as it must
    failure = cases[("wrong", "seed 0")].find("failure")
    assert failure is not None and "row wrong MISSED must-pass" in str(failure.get("message"))
    assert cases[("broken", "seed 0")].find("error") is not None
    not_run = cases[("broken", "seed 1")].find("error")
    assert not_run is not None and not_run.get("type") == "not-run"
    crashed = cases[("crashed", "seed 0")].find("error")
    assert crashed is not None and crashed.get("type") == "crashed"


# ---- end to end -------------------------------------------------------------------------------

TINY = """
[defaults]
backend = "redis"
lease_ms = 1000

[[row]]
name = "unfenced-pause"
nemesis = "pause"
fencing = "off"
time_limit_s = 12
seeds = [1]
expect = "must-find"

[[row]]
name = "quiet-but-expected-to-fail"
nemesis = "none"
time_limit_s = 2
expect = "must-find"
"""

CORRECT = """
[[row]]
name = "quiet"
backend = "redis"
nemesis = "none"
time_limit_s = 5  # shorter, and a loaded machine may see no acquire complete: unknown
seeds = [0, 1]
expect = "must-pass"
"""


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return run_fencecheck(*args, timeout=240, env=env)


@pytest.mark.netns
@pytest.mark.usefixtures("no_leftovers")
def test_a_missed_expectation_is_named_and_exits_1(tmp_path: Path) -> None:
    path = matrix_file(tmp_path, TINY)
    store, out_dir, junit = tmp_path / "store", tmp_path / "out", tmp_path / "j.xml"
    # Side by side: the quiet row ends first, and every file still lists rows in file order.
    r = run_cli("matrix", str(path), "--store", str(store), "--out", str(out_dir),
                "--junit", str(junit), "--jobs", "2")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "2 weight units at once" in r.stdout
    rows = json.loads((out_dir / "matrix.json").read_text())["rows"]
    assert [x["row"] for x in rows] == ["unfenced-pause", "quiet-but-expected-to-fail"]
    missed = [x for x in r.stdout.splitlines() if x.startswith("MISSED")]
    assert len(missed) == 1 and "quiet-but-expected-to-fail" in missed[0], r.stdout
    assert "1/2 rows met" in r.stdout
    html = (out_dir / "compare.html").read_text()
    section = html[html.index('id="expectations"'):html.index("</section>",
                                                               html.index('id="expectations"'))]
    assert "<strong>quiet-but-expected-to-fail</strong>" in section and "MISSED" in section
    assert section.count("MISSED") == 1  # unfenced-pause met its expectation
    report = next((store / "quiet-but-expected-to-fail").glob("2*/report.html"))
    assert os.path.relpath(report, out_dir) in section  # the missed row links to its report
    assert str(report) in r.stdout
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == "1" and suite.get("errors") == "0"
    assert [c.get("classname") for c in suite.iter("testcase")] == [x["row"] for x in rows]
    failing = [c.get("classname") for c in suite.iter("testcase") if c.find("failure") is not None]
    assert failing == ["quiet-but-expected-to-fail"]


@pytest.mark.netns
@pytest.mark.usefixtures("no_leftovers")
def test_met_expectations_exit_0(tmp_path: Path) -> None:
    path = matrix_file(tmp_path, CORRECT)
    # Both seeds at once, in one test folder: each finds its own run directory.
    r = run_cli("matrix", str(path), "--store", str(tmp_path / "store"), "--jobs", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "MISSED" not in r.stdout and "1/1 rows met" in r.stdout
    assert len(list((tmp_path / "store" / "quiet").glob("2*/report.html"))) == 2
    out = next((tmp_path / "store" / "_matrix").glob("*/matrix.json"))
    runs = json.loads(out.read_text())["rows"][0]["runs"]
    assert [x["seed"] for x in runs] == [0, 1]
    assert len({x["run_dir"] for x in runs}) == 2
    assert len(list((tmp_path / "store" / "_matrix").glob("*/compare.html"))) == 1


@pytest.mark.netns
@pytest.mark.usefixtures("no_leftovers")
def test_a_run_past_its_timeout_is_stopped_torn_down_and_missed(tmp_path: Path) -> None:
    path = matrix_file(tmp_path, """
[[row]]
name = "slow"
backend = "redis"
nemesis = "none"
time_limit_s = 120
timeout_s = 6
expect = "must-pass"
""")
    started = time.monotonic()
    r = run_cli("matrix", str(path), "--store", str(tmp_path / "store"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert time.monotonic() - started < 60  # SIGTERM, heal, teardown: not the 120 s limit
    assert "slow seed 0: timeout" in r.stdout and "MISSED row slow" in r.stdout, r.stdout
    run_dir = next((tmp_path / "store" / "slow").glob("2*"))
    assert (run_dir / "history.jsonl").is_file()  # the controller unwound and kept the history
    assert not processes_matching(str(tmp_path))
