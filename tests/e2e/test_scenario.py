"""`run_scenario` runs one `fencecheck run` configuration (matrix-row option names) and returns
its verdict and run folder; the `fencecheck_scenario` fixture puts them in the JUnit report.
Short real runs on network namespaces, fixed seeds."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fencecheck.api import ConfigError, run_scenario
from tests.api.test_plugin import outcomes, run_pytest


@pytest.mark.netns
@pytest.mark.usefixtures("no_leftovers")
def test_a_paused_unfenced_redis_is_found_with_its_run_folder(tmp_path: Path) -> None:
    # Faults every 0.5-1 s: several pauses of the holder land in 15 s even on a loaded machine.
    result = run_scenario(backend="redis", fencing=False, nemesis="pause", time_limit_s=15,
                          lease_ms=1000, nemesis_interval_s=(0.5, 1.0), seed=1, store=tmp_path)
    assert result.valid is False, result.summary()
    assert result.seed == 1
    assert result.run_dir is not None and result.run_dir.is_relative_to(tmp_path)
    assert (result.run_dir / "report.html").is_file()
    kept = json.loads((result.run_dir / "results.json").read_text())
    assert kept["valid"] is False and kept["incidents"] == result.incidents
    assert {v["kind"] for v in result.violations} & {
        "stale-write-accepted", "interleaved-writes", "lost-update"}


SCENARIO_TEST = '''
def test_redis_without_faults(fencecheck_scenario):
    result = fencecheck_scenario(nemesis="none", time_limit_s=8, seed=7)
    assert result.valid is True, result.summary()
'''


@pytest.mark.netns
@pytest.mark.usefixtures("no_leftovers")
def test_the_fixture_keeps_runs_in_the_store_and_reports_them(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_scenario.py").write_text(SCENARIO_TEST)
    junit, store = tmp_path / "junit.xml", tmp_path / "kept"
    proc = run_pytest(sys.executable, project, f"--junitxml={junit}",
                      f"--fencecheck-store={store}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [(state, props)] = outcomes(junit).values()
    assert state == "passed"
    assert props["fencecheck_verdict"] == "valid" and props["fencecheck_seed"] == "7"
    run_dir = Path(props["fencecheck_run_dir"])
    assert run_dir.is_relative_to(store) and (run_dir / "history.jsonl").is_file()


@pytest.mark.parametrize(("options", "message"), [
    ({"expect": "must-find"}, "expect: a row's expectation"),
    ({"seeds": [1, 2]}, "seeds: run_scenario runs one seed"),
    ({"time_limit": 5}, "time_limit: Extra inputs are not permitted"),
    ({"backend": "memcached"}, "backend: unknown backend 'memcached'"),
    ({"nemesis": "pause,flood"}, "nemesis: unknown fault 'flood'"),
])
def test_a_bad_option_is_one_line_naming_it(options: dict[str, object], message: str,
                                            tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        run_scenario(store=tmp_path, **options)
    assert "\n" not in str(e.value)
