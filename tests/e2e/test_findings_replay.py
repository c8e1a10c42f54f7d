"""The shipped findings replay (issue 29): `fencecheck run --replay examples/findings/<name>`
plays the finding's recorded fault schedule on its recorded configuration and finds the
violation kind its finding.toml names.

Every finding replayed in every run of the test command would cost minutes (a client-go replay
alone starts three kube-apiservers), more than the command's budget allows; so one finding a run,
rotating with the UTC day (the day number modulo the number of findings), and
benchmarks/bench_replay.py --findings measures all of them, ten tries each. FC_REPLAY_FINDING
picks instead: a finding's name, or `all` (tests/e2e/replay_pick.py). Each finding is a test of
its own; only the picked ones are collected.

A replay is not deterministic (a real system's timing decides whether the stale holder's write
lands in the successor's section), and the bar is 8 replays in 10: so the chosen finding may be
replayed twice, and a finding that meets the bar misses both with a chance of at most 4 %. The
kind asserted is never loosened: it must be the recorded one.
"""

from __future__ import annotations

import importlib
import json
import os
import tomllib
from pathlib import Path
from typing import Any

import pytest

from fencecheck.descriptors import catalog
from tests.conftest import (
    fc_namespaces,
    run_directory,
    run_fencecheck,
    wait_for_late_builds,
)
from tests.e2e.replay_pick import ENV, FINDINGS, chosen, picked, shipped
from tests.e2e.test_run_backends import kinds

TRIES = 2  # the bar is 8 of 10: two misses in a row at most 0.2 * 0.2 = 4 %


def test_the_rotation_takes_each_finding_in_turn_and_the_variable_overrides_it() -> None:
    names = ["a", "b", "c"]
    assert [chosen(names, "", d) for d in range(4)] == [["a"], ["b"], ["c"], ["a"]]
    assert chosen(names, "all", 5) == names
    assert chosen(names, "b", 0) == ["b"]
    assert len(shipped()) >= 7  # issue 29's seven findings at least


def _late(backend: str) -> bool:
    """Whether the backend's servers are a late build (scripts/test.sh builds those beside the
    tests: consul): a replay on it waits for that build like the backend's own tests."""
    spec = catalog.backends()[backend].server_build
    return spec is not None and bool(getattr(importlib.import_module(spec), "LATE", False))


def _replay(folder: Path, store: Path) -> tuple[int, set[str], str]:
    """One replay of a shipped finding: its exit code, the kinds it found and its run folder."""
    r = run_fencecheck("run", "--replay", str(folder), "--store", str(store), timeout=900,
                       env={**os.environ, "COLUMNS": "500"})
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode in (0, 1), r.stdout + r.stderr
    run_dir = run_directory(r.stdout)
    test = json.loads((run_dir / "test.json").read_text())
    assert test["config"]["replay"] is not None  # the recorded schedule was played
    assert not fc_namespaces(test["run_id"])
    results: dict[str, Any] = json.loads((run_dir / "results.json").read_text())
    return r.returncode, kinds(results), str(run_dir)


def test_the_finding_asked_for_is_shipped() -> None:
    assert set(picked()) <= set(shipped()), f"{ENV}: not one of {shipped()}"


# Only the picked findings are collected (tests/conftest.py fixes the day's pick before the
# xdist workers start, so they all collect the same one).
@pytest.mark.netns
@pytest.mark.usefixtures("no_leftovers")
@pytest.mark.timeout(1900)  # two replays of up to 15 min each on a loaded machine
@pytest.mark.parametrize("name", picked())
def test_a_shipped_finding_replays_to_its_kind(tmp_path: Path, name: str) -> None:
    folder = FINDINGS / name
    kind = tomllib.loads((folder / "finding.toml").read_text())["kind"]
    backend = json.loads((folder / "test.json").read_text())["config"]["backend"]
    if _late(backend):
        wait_for_late_builds()
    tries = []
    for _ in range(TRIES):
        code, found, run_dir = _replay(folder, tmp_path / "store")
        tries.append((code, sorted(found), run_dir))
        if code == 1 and kind in found:
            return
    pytest.fail(f"{name}: no {kind} in {TRIES} replays: {tries}")
