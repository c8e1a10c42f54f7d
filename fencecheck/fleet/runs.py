"""Running a matrix: `run_matrix` runs its rows, each run in a child process of its own.

- `run_matrix(matrix, out_dir, junit, notify, jobs)`: every row's runs (see `parallel`; side by
  side, the heaviest and longest first: `start_order`), then the writers of
  `fencecheck.fleet.outputs` (comparison, JUnit, matrix.json).
- `parallel(tasks, run, jobs, weight)`: up to `jobs` weight units at once, started in order;
  `auto_jobs()` is `--jobs auto`.
- `_run_one`: one run in a child (`python -m fencecheck.fleet.runs CONFIG.json RESULT.json`,
  `_child` below), stopped past its timeout; `_Signals` passes SIGINT/SIGTERM on to the children.
The rows and their loading are in `fencecheck.fleet.matrix`.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

from pydantic import ValidationError

from fencecheck.fleet.matrix import (
    JUDGED,
    VERDICT_OF_EXIT,
    Matrix,
    MatrixOutcome,
    Row,
    RowResult,
    RunRecord,
)
from fencecheck.fleet.outputs import write_compare, write_junit, write_matrix_json
from fencecheck.fleet.shard import expected_s
from fencecheck.run import wiring
from fencecheck.run.config import ConfigError, RunConfig

log = logging.getLogger(__name__)

STOP_GRACE_S = 90.0  # after SIGTERM the controller heals and tears down; then SIGKILL


Notify = Callable[[Row, int, RunRecord | None], None]  # record None: the run starts now


class _Signals:
    """SIGINT/SIGTERM stop the matrix after the runs going on; they are passed on to each run's
    child process (which heals and tears down on its own), and no run starts after them."""

    def __init__(self) -> None:
        self.children: set[subprocess.Popen[bytes]] = set()
        self.received: int | None = None
        self._old: dict[int, Any] = {}
        self._lock = threading.Lock()

    def add(self, child: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self.children.add(child)
            late = self.received
        if late is not None:  # the signal came while this child was being started
            child.send_signal(late)

    def remove(self, child: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self.children.discard(child)

    def _handler(self, signum: int, _frame: FrameType | None) -> None:
        log.warning("%s: stopping after the runs going on", signal.Signals(signum).name)
        self.received = self.received or signum
        with self._lock:
            children = list(self.children)
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    def __enter__(self) -> _Signals:
        # Handlers can only be set from the main thread; elsewhere the caller owns signals.
        if threading.current_thread() is threading.main_thread():
            self._old = {s: signal.signal(s, self._handler)
                         for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *_exc: object) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)


def _run_dirs(store: Path, test: str) -> set[Path]:
    base = store / test
    if not base.is_dir():
        return set()
    return {p for p in base.iterdir() if p.is_dir() and not p.is_symlink()}


def _stop_child(proc: subprocess.Popen[bytes], run_dir: Path | None) -> None:
    """SIGTERM lets the controller heal and tear down; past the grace, kill it and remove what
    it recorded with `fencecheck teardown --run`."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_GRACE_S)
        return
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    from fencecheck.records import test as test_record
    from fencecheck.records.base import RecordError

    run_id = None
    if run_dir is not None and (run_dir / "test.json").is_file():
        try:
            run_id = test_record.read(run_dir / "test.json").run_id
        except RecordError as e:  # no run id to tear down by: say why
            log.warning("run killed: %s", e)
    if isinstance(run_id, str):
        argv = [sys.executable, "-m", "fencecheck", "teardown", "--run", run_id]
        log.warning("run %s killed: %s", run_id, argv)
        subprocess.run(argv, capture_output=True, timeout=300, check=False)


def _new_run_dir(cfg: RunConfig, before: set[Path]) -> Path | None:
    """The run directory this config's child made (when it could not say so itself): new since
    `before`, and of this seed, since with --jobs the other seeds of its row may be running in
    the same test folder."""
    from fencecheck.records import test as test_record
    from fencecheck.records.base import RecordError

    new = sorted(_run_dirs(cfg.store, cfg.test_name) - before)
    mine = []
    for d in new:
        try:
            seed = test_record.read(d / "test.json").run_seed
        except (OSError, RecordError):
            seed = None  # not written yet: the child died early; judged by the seed alone
        if seed == cfg.seed or not isinstance(seed, int):
            mine.append(d)
    return mine[-1] if mine else None


def _verdict(code: int, timed_out: bool, reported: bool) -> str:
    """reported: the child wrote its result file (the controller finished, or refused)."""
    if timed_out:
        return "timeout"
    if code > 128 or code < 0:
        return "interrupted"
    if reported and code in VERDICT_OF_EXIT:
        return VERDICT_OF_EXIT[code]
    return "crashed"


def _run_one(cfg: RunConfig, stem: str, timeout_s: float, logs: Path,
             sig: _Signals) -> RunRecord:
    logs.mkdir(parents=True, exist_ok=True)
    cfg_path, result_path, log_path = (logs / f"{stem}.config.json",
                                       logs / f"{stem}.result.json", logs / f"{stem}.log")
    cfg_path.write_text(cfg.model_dump_json(indent=2) + "\n")
    result_path.unlink(missing_ok=True)
    before = _run_dirs(cfg.store, cfg.test_name)
    argv = [sys.executable, "-m", "fencecheck.fleet.runs", str(cfg_path), str(result_path)]
    log.info("run: %s", argv)
    start = time.monotonic()
    timed_out = False
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        sig.add(proc)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            log.warning("%s: past its %.0f s timeout: stopping it", stem, timeout_s)
            _stop_child(proc, _new_run_dir(cfg, before))
        finally:
            sig.remove(proc)
    duration = time.monotonic() - start
    code: int = proc.returncode if proc.returncode is not None else -signal.SIGKILL
    result: dict[str, Any] = {}
    if result_path.is_file():
        result = json.loads(result_path.read_text())
        code = int(result["exit_code"])
    run_dir = Path(result["run_dir"]) if result.get("run_dir") else None
    if run_dir is None:
        run_dir = _new_run_dir(cfg, before)
    if timed_out:
        code = -signal.SIGTERM
    error = result.get("error")
    verdict = _verdict(code, timed_out, bool(result))
    if error is None and verdict not in JUDGED:
        error = f"see {log_path}"
    report = run_dir / "report.html" if run_dir and (run_dir / "report.html").is_file() else None
    return RunRecord(cfg.seed, code, verdict, run_dir, report, round(duration, 3), error,
                     log_path)


def run_matrix(matrix: Matrix, out_dir: Path, junit: Path | None = None,
               notify: Notify | None = None, jobs: int = 1) -> MatrixOutcome:
    """Run every row (with jobs > 1, up to `jobs` weight units of runs at once, the heaviest and
    longest started first: see `parallel` and `start_order`), then write the comparison report
    and JUnit XML (if asked). The results are in row and seed order whatever order the runs
    start and end in, so every file written is the same as with jobs=1."""
    notify = notify or (lambda row, seed, rec: None)
    out_dir.mkdir(parents=True, exist_ok=True)
    tasks = [(row, seed, cfg) for row in matrix.rows
             for seed, cfg in zip(row.seeds, row.configs, strict=True)]
    if jobs > 1:
        tasks = start_order(tasks)
    done: dict[tuple[int, int], RunRecord] = {}
    told = threading.Lock()

    def say(row: Row, seed: int, rec: RunRecord | None) -> None:
        with told:
            notify(row, seed, rec)

    with _Signals() as sig:
        def one(task: tuple[Row, int, RunConfig]) -> None:
            row, seed, cfg = task
            if sig.received is not None:
                return
            say(row, seed, None)
            stem = f"{row.index:02d}-{cfg.test_name}-seed{seed}"  # unnamed rows may clash
            rec = _run_one(cfg, stem, row.timeout_s, out_dir / "logs", sig)
            done[(row.index, seed)] = rec
            say(row, seed, rec)

        parallel(tasks, one, jobs, lambda t: wiring.weight(t[2]),
                 stop=lambda: sig.received is not None)
    results = [RowResult(row, tuple(done[(row.index, s)] for s in row.seeds
                                    if (row.index, s) in done)) for row in matrix.rows]
    compare_html, report_error = write_compare(results, out_dir)
    junit_error = None
    if junit is not None:
        try:
            write_junit(results, junit, f"fencecheck matrix {matrix.path.stem}")
        except OSError as e:  # the runs are done: still write and print everything else
            log.warning("JUnit file failed: %s", e)
            junit_error = f"{junit}: {e.strerror or e}"
    outcome = MatrixOutcome(tuple(results), out_dir, compare_html,
                            None if junit_error else junit, report_error, sig.received,
                            junit_error)
    write_matrix_json(outcome, out_dir / "matrix.json")
    return outcome


T = TypeVar("T")


def start_order(tasks: Sequence[tuple[Row, int, RunConfig]]) -> list[tuple[Row, int, RunConfig]]:
    """The order runs side by side start in: by weight, then expected time, both descending
    (ties in row and seed order). In row order the nightly's heavy rows (three kube-apiservers,
    JVM clusters, Galera, Hazelcast) came last and ran nearly alone at the end: 645 s at
    `--jobs auto` against 1,592 s one after another (0.41x; docs/measurements.md)."""
    return sorted(tasks, key=lambda t: (-wiring.weight(t[2]), -expected_s(t[0])))


def parallel(tasks: Sequence[T], run: Callable[[T], None], jobs: int,
             weight: Callable[[T], int], stop: Callable[[], bool] = lambda: False) -> None:
    """Run each task, up to `jobs` weight units at once (a task heavier than `jobs` counts as
    `jobs`: it runs alone), starting them in order: the next task waits until it fits, so a
    heavy row is never overtaken for ever by light ones. jobs=1 is one after another in this
    thread. Returns when every started task has ended; `stop()` true starts no more."""
    if jobs <= 1:
        for t in tasks:
            if stop():
                return
            run(t)
        return
    free = jobs
    cond = threading.Condition()
    errors: list[BaseException] = []

    def body(t: T, w: int) -> None:
        nonlocal free
        try:
            run(t)
        except BaseException as e:  # raised in the caller's thread once all have ended
            errors.append(e)
        finally:
            with cond:
                free += w
                cond.notify_all()

    threads: list[threading.Thread] = []
    for t in tasks:
        w = min(max(1, weight(t)), jobs)
        with cond:
            while free < w and not stop() and not errors:
                cond.wait(timeout=0.5)
            if stop() or errors:
                break
            free -= w
        th = threading.Thread(target=body, args=(t, w), daemon=True)
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    if errors:
        raise errors[0]


def auto_jobs(cores: int | None = None) -> int:
    """`--jobs auto`: weight units for this machine. Runs wait more than they compute (a run's
    time is its time limit, its CPU a fraction of one core), so three units per core: a
    three-node etcd or ZooKeeper run and a redis run a core. Measured in
    benchmarks/bench_matrix.py (docs/measurements.md, "Many runs side by side"): at two a core
    a three-unit run (three kube-apiservers, a JVM cluster) had one unit beside it, and the
    nightly took 0.65x of one after another on an idle machine at load average about 1."""
    return max(1, 3 * (cores or os.cpu_count() or 1))


def _child(argv: Sequence[str]) -> int:
    """`python -m fencecheck.fleet.runs CONFIG.json RESULT.json`: one run through the controller;
    RESULT.json gets the run directory and exit code, or the one-line error (exit 3)."""
    from fencecheck.checker.base import CheckerError
    from fencecheck.clusters.base import ClusterError
    from fencecheck.run.controller import run
    from fencecheck.run.store import StoreError
    from fencecheck.workloads.base import WorkloadError

    # The controller lowers the root level to DEBUG for its own log file; this log keeps warnings.
    handler = logging.StreamHandler()
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    cfg_path, result_path = Path(argv[0]), Path(argv[1])
    result: dict[str, Any]
    try:
        cfg = RunConfig.model_validate_json(cfg_path.read_text())
        outcome = run(cfg)
        result = {"run_dir": str(outcome.run_dir), "exit_code": outcome.exit_code}
    except (ConfigError, StoreError, ClusterError, WorkloadError, CheckerError,
            ValidationError) as e:
        log.error("%s", e)
        result = {"run_dir": None, "exit_code": 3, "error": str(e).splitlines()[0]}
    result_path.write_text(json.dumps(result) + "\n")
    return int(result["exit_code"])


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
