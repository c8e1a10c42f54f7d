"""The pytest plugin, as a user meets it: a test file of theirs run by a pytest of its own, with
the plugin loaded through the package's `pytest11` entry point (no conftest, no -p)."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.api.user_project import EXPECTED_OUTCOMES, write_user_project


def run_pytest(python: str, project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest in `project` (the cwd), from `python`'s environment."""
    return subprocess.run([python, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args],
                          cwd=project, capture_output=True, text=True, timeout=300, check=False)


def outcomes(junit: Path) -> dict[str, tuple[str, dict[str, str]]]:
    """test name -> (outcome, its properties) from a JUnit XML file."""
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        state = ("failed" if case.find("failure") is not None
                 else "error" if case.find("error") is not None else "passed")
        props = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
        out[case.get("name", "")] = (state, props)
    return out


def check_user_run(python: str, tmp_path: Path) -> str:
    """Run the user's tests, check every outcome, story and property; return the output."""
    project = write_user_project(tmp_path / "project")
    junit, store = tmp_path / "junit.xml", tmp_path / "kept"
    proc = run_pytest(python, project, f"--junitxml={junit}", f"--fencecheck-store={store}")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out  # some tests failed (not 2-4: no usage/internal error)
    got = outcomes(junit)
    assert {name: state for name, (state, _) in got.items()} == EXPECTED_OUTCOMES, out
    verdicts = {name: props["fencecheck_verdict"] for name, (_, props) in got.items()}
    assert verdicts == {"test_planted_double_grant": "invalid", "test_correct_history": "valid",
                        "test_nothing_recorded": "unknown",
                        "test_body_fails_and_history_is_bad": "invalid"}
    # The failure is the incident story, in the test's own failure (not a teardown error).
    assert "fencecheck found violations in the recorded lock history" in out
    assert ('incident 1: Process 1 was granted lock "orders" (token 1)' in out
            and "What followed: 1 double-grant." in out), out
    # A body that failed on its own keeps its own error; the story is attached beside it.
    assert "the user's own assertion" in out
    assert 'incident 1: Process 1 was granted lock "orders" (token 5)' in out
    for name, (_, props) in got.items():
        run_dir = Path(props["fencecheck_run_dir"])
        assert run_dir.is_relative_to(store) and name in str(run_dir)
        assert (run_dir / "history.jsonl").is_file() and (run_dir / "results.json").is_file()
    return out


def test_lock_history_fails_on_violations_and_passes_a_correct_history(tmp_path: Path) -> None:
    check_user_run(sys.executable, tmp_path)


BAD_HISTORY_TEST = '''
import multiprocessing


def child(rec):
    with rec.op(1, "acquire", lock="l", lease_ms=1000) as op:
        op.ok(token=2)


def test_one_process_id_in_two_os_processes(lock_history):
    with lock_history.op(1, "acquire", lock="l", lease_ms=1000) as op:
        proc = multiprocessing.get_context("fork").Process(target=child, args=(lock_history,))
        proc.start()
        proc.join()
        op.ok(token=1)
'''


def test_a_history_the_checker_cannot_read_fails_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "test_bad.py").write_text(BAD_HISTORY_TEST)
    proc = run_pytest(sys.executable, tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert ("fencecheck could not judge the recorded lock history: " in proc.stdout
            and "history.jsonl:2: process 1 invokes acquire while its acquire invoked on line 1 "
                "has not completed" in proc.stdout), proc.stdout
    assert "Traceback" not in proc.stdout


def test_the_plugin_is_active_in_this_suite(pytestconfig: pytest.Config) -> None:
    # Installed, the plugin loads in every pytest of this environment, this suite's included.
    assert pytestconfig.pluginmanager.has_plugin("fencecheck")


def test_loading_the_plugin_loads_no_fencecheck_code() -> None:
    probe = ("import sys; before = set(sys.modules); import fencecheck.api.pytest_plugin; "
             "print(sorted(m for m in set(sys.modules) - before if not m.startswith('_')))")
    proc = subprocess.run([sys.executable, "-c", f"import pytest; {probe}"],
                          capture_output=True, text=True, timeout=120, check=True)
    # fencecheck.api itself is a docstring and a lazy __getattr__: it imports nothing
    assert proc.stdout.strip() == "['fencecheck', 'fencecheck.api', 'fencecheck.api.pytest_plugin']"


def test_fencecheck_store_must_be_given_a_folder(tmp_path: Path) -> None:
    project = write_user_project(tmp_path / "project")
    proc = run_pytest(sys.executable, project, "--fencecheck-store")
    assert proc.returncode == 4  # a usage error, in pytest's own words
    assert "--fencecheck-store" in proc.stderr
