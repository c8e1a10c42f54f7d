"""A plugin package from outside the tree (tests/plugin_pkg: a lock client, a fault and a check)
is pip-installed into the test venv, listed by `fencecheck plugins`, and driven end to end by
`fencecheck run` (the check judges the run, and its kind is a column of the comparison); a fault
a runtime cannot host is refused up front."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_fencecheck

PKG = Path(__file__).resolve().parents[1] / "plugin_pkg"
DIST = "fencecheck-demo-plugin"


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "-q", "--disable-pip-version-check", *args],
                   check=True, capture_output=True, timeout=300)


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment of a `fencecheck` that has the plugin installed. Built from a copy (a
    build leaves build/ and egg-info beside the sources), in isolation (the venv's setuptools may
    predate bdist_wheel), and installed into a folder of its own on PYTHONPATH, not into the
    venv: tests running beside this one (the suite runs in parallel) see only the built-in
    catalog and checks, before, during and after."""
    base = tmp_path_factory.mktemp("plugin")
    src, target = base / "pkg", base / "site"
    shutil.copytree(PKG, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    _pip("install", "--no-deps", "--target", str(target), str(src))
    path = os.pathsep.join(p for p in (str(target), os.environ.get("PYTHONPATH", "")) if p)
    yield {**os.environ, "PYTHONPATH": path}


def test_plugins_lists_the_installed_client_and_fault(plugin: dict[str, str]) -> None:
    r = run_fencecheck("plugins", timeout=60, env=plugin)
    assert r.returncode == 0, r.stderr
    assert "fencecheck.clients: demo-setnx" in r.stdout and DIST in r.stdout
    assert "fencecheck.faults: freeze-all" in r.stdout
    assert "fencecheck.checks: demo-acquires" in r.stdout
    assert "  demo-acquires: demo-unseen" in r.stdout  # the check with its kinds
    redis_line = next(x for x in r.stdout.splitlines() if x.strip().startswith("redis:"))
    assert redis_line.strip().endswith("demo-setnx")  # appended: the default stays first


def test_an_unsupported_runtime_is_refused_naming_both(plugin: dict[str, str],
                                                       tmp_path: Path) -> None:
    r = run_fencecheck("run", "--store", str(tmp_path), "--nemesis", "freeze-all", "--runtime",
                       "docker", timeout=60, env=plugin)
    assert r.returncode == 3 and "Traceback" not in r.stderr
    assert "freeze-all" in r.stderr and "docker" in r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.netns
@pytest.mark.usefixtures("no_leftovers")
def test_plugin_client_and_fault_run_end_to_end(plugin: dict[str, str], tmp_path: Path) -> None:
    r = run_fencecheck("run", "--store", str(tmp_path), "--client", "demo-setnx", "--nemesis",
                       "freeze-all", "--time-limit", "6", "--interval", "0.5,1", "--concurrency",
                       "3", "--seed", "3", timeout=180, env=plugin)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    run_dir = next(tmp_path.glob("*/latest")).resolve()
    assert json.loads((run_dir / "nodes" / "c1" / "worker.json").read_text())["client"] == \
        "demo-setnx"
    history = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
    grants = [e for e in history if e["f"] == "acquire" and e["type"] == "ok"]
    assert grants and all(e["value"].get("token") is None for e in grants)
    faults = [e for e in history if e["process"] == "nemesis" and e["type"] == "ok"]
    assert any(e["f"] == "start-freeze-all" and e["value"]["frozen"] == ["c1", "c2", "c3"]
               for e in faults), faults
    assert any(e["f"] == "stop-freeze-all" for e in faults)
    demo = json.loads((run_dir / "results.json").read_text())["checks"]["demo-acquires"]
    assert demo["valid"] is True and demo["acquired"] == len(grants)
    r = run_fencecheck("compare", str(tmp_path), "--out", str(tmp_path / "cmp"), timeout=120,
                       env=plugin)
    assert r.returncode == 0, r.stderr
    header = (tmp_path / "cmp" / "compare.csv").read_text().splitlines()[0].split(",")
    assert "demo-unseen" in header and "duplicate-effect" in header
