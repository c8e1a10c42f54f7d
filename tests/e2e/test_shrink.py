"""fencecheck.nemesis.shrink: ddmin finds a 1-minimal failing subset (pure, with a predicate
standing in
for real reruns), a removed step's time goes to the next kept one, a spent budget keeps the best
so far, and a run folder that cannot be shrunk is one line, exit 3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fencecheck.nemesis.schedule import HOLDER, Step
from fencecheck.nemesis.shrink import BudgetSpent, ddmin, subset
from tests.conftest import run_fencecheck


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12).flatmap(
    lambda n: st.tuples(st.just(n), st.sets(st.integers(0, n - 1), min_size=1, max_size=3))))
def test_ddmin_finds_exactly_the_needed_steps(case: tuple[int, set[int]]) -> None:
    n, needed = case
    calls: list[list[int]] = []

    def fails(keep: list[int]) -> bool:
        calls.append(keep)
        return needed <= set(keep)

    result = ddmin(list(range(n)), fails)
    assert set(result) == needed
    assert len(calls) <= 2 * n * n  # ddmin's worst case is quadratic


def test_a_spent_budget_keeps_the_smallest_failing_set_so_far() -> None:
    seen = 0

    def fails(keep: list[int]) -> bool:
        nonlocal seen
        seen += 1
        if seen > 1:
            raise BudgetSpent
        return True  # the first half fails

    assert ddmin(list(range(8)), fails) == [0, 1, 2, 3]


def test_removed_steps_keep_the_rest_at_their_recorded_times() -> None:
    steps = [Step(1.0, "pause", 2.0, HOLDER), Step(0.5, "pause", 3.0, HOLDER),
             Step(1.5, "pause", 1.0, HOLDER)]
    kept = subset(steps, [2])
    assert [s.gap_s for s in kept] == [1.0 + 2.0 + 0.5 + 3.0 + 1.5]
    assert subset(steps, [0, 2])[1].gap_s == 0.5 + 3.0 + 1.5
    assert subset(steps, [0, 1, 2]) == steps


def test_shrink_of_a_run_without_violations_is_exit_3(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text(json.dumps({"checks": {"c": {"violations": []}}}))
    r = run_fencecheck("shrink", str(tmp_path), timeout=60)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "found no violations" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("missing", ["results.json"])
def test_shrink_of_a_folder_that_is_no_run_is_exit_3(tmp_path: Path, missing: str) -> None:
    r = run_fencecheck("shrink", str(tmp_path), timeout=60)
    assert r.returncode == 3 and missing in r.stderr, r.stderr


@pytest.mark.netns
@pytest.mark.timeout(600)  # a recorded run and a few reruns of 10 s
@pytest.mark.usefixtures("no_leftovers")
def test_shrink_of_an_unfenced_pause_run_ends_with_fewer_faults_of_the_same_kind(
        tmp_path: Path) -> None:
    store = tmp_path / "store"
    r = run_fencecheck("run", "--backend", "redis", "--nemesis", "pause", "--fencing", "off",
                       "--time-limit", "10", "--lease-ms", "1000", "--concurrency", "4", "--seed",
                       "3", "--interval", "0.5,1", "--store", str(store), timeout=240)
    assert r.returncode == 1, r.stdout + r.stderr
    original = next(store.glob("*/2*"))
    recorded = json.loads((original / "schedule.json").read_text())["steps"]
    assert len(recorded) >= 2, recorded  # several pauses, each past the lease
    out = tmp_path / "shrunk"
    r = run_fencecheck("shrink", str(original), "--store", str(store), "--out", str(out), "--tries",
                       "2", "--budget", "400", timeout=560)
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads((out / "shrink.json").read_text())
    shrunk = json.loads((out / "schedule.json").read_text())["steps"]
    assert len(shrunk) == summary["shrunk_faults"] < len(recorded)
    assert summary["confirming_run"], summary  # a real rerun of the shrunk schedule found it
    confirm = json.loads((Path(summary["confirming_run"]) / "results.json").read_text())
    kinds = {v["kind"] for c in confirm["checks"].values() for v in c["violations"]}
    assert kinds & set(summary["kinds"])
    assert (out / "test.json").is_file()  # a folder `fencecheck run --replay` takes
