"""fencecheck.fleet.runs.parallel and --jobs: at most `jobs` weight units run at once, a task
heavier
than that runs alone, tasks start in order, a stop starts no more, and a bad --jobs is exit 3.
Pure logic with sleeping tasks: no runs."""

from __future__ import annotations

import importlib
import itertools
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fencecheck.cli.app import app
from fencecheck.cli.matrix import parse_jobs
from fencecheck.fleet.matrix import MatrixError, load_matrix
from fencecheck.fleet.runs import auto_jobs, parallel, start_order
from fencecheck.fleet.shard import expected_s
from fencecheck.run import wiring

REPO = Path(__file__).resolve().parents[3]


def _record(weights: list[int], jobs: int, stop_after: int | None = None
            ) -> tuple[list[int], int, list[tuple[int, int]]]:
    """Run tasks 0..n-1 with the given weights; (start order, peak load, (start, end) pairs)."""
    lock = threading.Lock()
    load, peak, order, spans = 0, 0, [], []
    clock = iter(range(10_000))

    def run(i: int) -> None:
        nonlocal load, peak
        with lock:
            load += min(weights[i], jobs)
            peak = max(peak, load)
            order.append(i)
            start = next(clock)
        time.sleep(0.02 * (1 + i % 3))
        with lock:
            load -= min(weights[i], jobs)
            spans.append((start, next(clock)))

    parallel(range(len(weights)), run, jobs, lambda i: weights[i],
             stop=lambda: stop_after is not None and len(order) >= stop_after)
    return order, peak, spans


@pytest.mark.parametrize("jobs", [1, 2, 3, 4])
def test_never_more_than_jobs_units_and_in_order(jobs: int) -> None:
    weights = [1, 2, 1, 3, 1, 1, 2, 1, 1, 4]
    order, peak, _ = _record(weights, jobs)
    assert order == list(range(len(weights)))  # started in order: no task overtakes another
    assert peak <= jobs
    if jobs > 1:
        assert peak > 1  # it did run things side by side


def test_one_job_is_one_after_another() -> None:
    _, peak, spans = _record([1, 1, 1], 1)
    assert peak == 1
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))


def test_a_task_heavier_than_jobs_runs_alone() -> None:
    _, peak, _ = _record([1, 9, 1], 3)
    assert peak == 3  # the heavy one counts as all of it


def test_stop_starts_no_more() -> None:
    order, _, _ = _record([1] * 10, 2, stop_after=3)
    assert len(order) < 10


def test_an_error_in_a_task_is_raised_after_all_have_ended() -> None:
    ended = []

    def run(i: int) -> None:
        if i == 1:
            raise RuntimeError("boom")
        time.sleep(0.05)
        ended.append(i)

    with pytest.raises(RuntimeError, match="boom"):
        parallel([0, 1, 2], run, 2, lambda i: 1)
    assert ended == [0]  # 0 ran to its end; 2 was never started


def test_jobs_option() -> None:
    assert parse_jobs("3") == 3
    assert parse_jobs("auto") == auto_jobs() >= 2
    assert auto_jobs(2) == 6
    for bad in ("0", "-1", "many", ""):
        with pytest.raises(MatrixError, match="--jobs"):
            parse_jobs(bad)


def test_a_bad_jobs_value_is_exit_3() -> None:
    result = CliRunner().invoke(app, ["matrix", "examples/nightly.toml", "--jobs", "lots"])
    assert result.exit_code == 3
    assert "--jobs: 'lots'" in result.stderr


def test_a_search_left_behind_does_not_end_a_host_that_runs_commands_in_process() -> None:
    # An abandoned model search makes the *program* os._exit at its end (fast); a host that runs
    # commands in-process (this test worker) must survive it: it once killed an xdist worker on
    # the next CliRunner call after a search had timed out in the same process.
    search = importlib.import_module("fencecheck.checker.linear.search")

    search._ABANDONED.append(object())
    try:
        result = CliRunner().invoke(app, ["matrix", "examples/nightly.toml", "--jobs", "lots"])
    finally:
        search.free_abandoned()
    assert result.exit_code == 3  # the command's own verdict; and this process is still here


def test_runs_side_by_side_start_heaviest_and_longest_first(tmp_path: Path) -> None:
    """The nightly's runs, as `matrix --jobs N` starts them: weight, then expected time, both
    descending, and row then seed order among equals; every run once."""
    m = load_matrix(REPO / "examples" / "nightly.toml", tmp_path / "store", runnable=False)
    tasks = [(row, seed, cfg) for row in m.rows
             for seed, cfg in zip(row.seeds, row.configs, strict=True)]
    started = start_order(tasks)
    assert sorted((r.index, s) for r, s, _ in started) == sorted((r.index, s) for r, s, _ in tasks)
    keys = [(-wiring.weight(c), -expected_s(r), r.index, s) for r, s, c in started]
    assert keys == sorted(keys)
    assert wiring.weight(started[0][2]) > wiring.weight(started[-1][2])
