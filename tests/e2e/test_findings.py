"""The shipped findings (examples/findings/<name>/) replayed through `fencecheck run --replay`:
each finds its finding's violation kind again, and where the library's evidence is recorded,
the violation names the library step.

Not in the README's test command: one replay is a whole run on its backend (client-go's is a
Kubernetes cluster and 20 s; ShedLock's is PostgreSQL, three JVMs and 45 s), over a minute of
serial time each on this machine, where the suite's budget has none left. How often each
replays to its kind is measured by `benchmarks/bench_replay.py --findings` (10 tries each);
this file runs one replay of each on demand:

    FENCECHECK_FINDINGS=1 .venv/bin/pytest tests/e2e/test_findings.py -n 2 -p no:cacheprovider
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

from tests.conftest import REPO, run_fencecheck

FINDINGS = sorted(p.parent.name for p in (REPO / "examples" / "findings").glob("*/finding.toml"))
STEPS = {"client-go-release": "release-wrote-empty-holder",
         "shedlock-jdbc-unowned-unlock": "unlock-matched-another-holder"}

pytestmark = pytest.mark.skipif(os.environ.get("FENCECHECK_FINDINGS") != "1",
                                reason="on demand: FENCECHECK_FINDINGS=1 (see the docstring)")


@pytest.mark.netns
@pytest.mark.timeout(900)
@pytest.mark.usefixtures("no_leftovers")
@pytest.mark.parametrize("name", FINDINGS)
def test_a_shipped_finding_replays_to_its_kind_named_by_its_step(
        name: str, tmp_path: Path) -> None:
    folder = REPO / "examples" / "findings" / name
    kind = tomllib.loads((folder / "finding.toml").read_text())["kind"]
    r = run_fencecheck("run", "--replay", str(folder), "--store", str(tmp_path), timeout=600)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stdout + r.stderr
    run_dir = Path(r.stdout.split("run directory:")[1].split()[0])
    results = json.loads((run_dir / "results.json").read_text())
    found = [v for c in results["checks"].values() for v in c["violations"] if v["kind"] == kind]
    assert found, f"{name}: no {kind} in the replay"
    if name in STEPS:
        assert any(v.get("cause", {}).get("step") == STEPS[name] for v in found), found[:3]
