"""Every shipped finding (examples/findings/<name>/) is what `fencecheck run --replay` and the
findings pages take: its words (finding.toml) with a violation kind the checks report, and a
configuration and schedule that `--replay` accepts, recorded with the versions it ran on. (Their
replays are measured by benchmarks/bench_replay.py --findings: a replay is a whole run, over a
minute each, and reproduces its kind in only some tries so far, so none is in the test command.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fencecheck.nemesis.replay import recorded_versions, replay_config
from fencecheck.reports.findings import read_words
from tests.conftest import REPO

FOLDERS = sorted(p.parent for p in (REPO / "examples" / "findings").glob("*/finding.toml"))
KINDS = {"double-grant", "lost-update", "duplicate-effect", "token-regression",
         "stale-write-accepted", "interleaved-writes"}


def test_the_findings_named_in_the_task_are_shipped() -> None:
    assert {"client-go-release", "shedlock-jdbc-unowned-unlock"} <= {f.name for f in FOLDERS}


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: f.name)
def test_a_shipped_finding_is_replayable_as_it_stands(folder: Path, tmp_path: Path) -> None:
    words = read_words(folder)
    assert words["kind"] in KINDS
    cfg = replay_config(folder, tmp_path)
    assert cfg.replay == (folder / "schedule.json").resolve() and cfg.store == tmp_path
    assert json.loads((folder / "schedule.json").read_text())["steps"]
    assert recorded_versions(folder).get("client")  # what --replay compares with
