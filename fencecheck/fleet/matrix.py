"""`fencecheck matrix`: many runs from one TOML file, each row with an expected outcome.

A matrix file has an optional `[defaults]` table and `[[row]]` tables. A row holds any option of
`RunConfig` (backend, client, resource, nemesis, fencing, time_limit_s, workload, ...) plus
`name`, `seeds` (one run per seed), `expect` ("must-find": every run finds violations, exit 1;
"must-pass": every run is valid, exit 0) and `timeout_s` (a run past it is stopped: missed).
`load_matrix` validates every row before anything runs (`MatrixError` names file, row and field);
`run_matrix` runs rows in order, each run in a child process of its own (a crashing or hung run
cannot take the matrix down, and the controller's signal handling stays per run), then hands the
rows to the writers of `reports`: the comparison (`reports.compare`: each configuration judged by
its row's expectation, the rows first) and JUnit XML (`reports.junit`: a case per row and seed
that passes when its run met the row's expectation).
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from fencecheck.reports.junit import Case, case_of_run, write_cases
from fencecheck.run import wiring
from fencecheck.run.config import ConfigError, RunConfig

log = logging.getLogger(__name__)

Expect = Literal["must-find", "must-pass"]
EXPECTED_VERDICT: dict[str, str] = {"must-find": "invalid", "must-pass": "valid"}
VERDICT_OF_EXIT: dict[int, str] = {0: "valid", 1: "invalid", 2: "unknown", 3: "error"}
JUDGED = ("valid", "invalid", "unknown")  # the checker ran: a miss is a failure, not an error
# Keys a row may not set: the matrix owns them (--store, seeds, the row's name).
RESERVED = {"store": "set by --store", "seed": "use seeds = [...]"}
TIMEOUT_SLACK_S = 300.0  # setup, teardown, check and report on top of the time limit
STOP_GRACE_S = 90.0  # after SIGTERM the controller heals and tears down; then SIGKILL


class MatrixError(Exception):
    """A matrix file or option that cannot run (one line; the CLI exits 3)."""


class _RowSpec(BaseModel):
    """The matrix's own keys of a row; every other key is a RunConfig option."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str | None = None
    expect: Expect
    seeds: tuple[int, ...] = Field((0,), min_length=1)
    timeout_s: float | None = Field(None, gt=0)

    @field_validator("seeds")
    @classmethod
    def _distinct(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if len(set(v)) != len(v):
            raise ValueError("must not repeat a seed")
        return v


@dataclass(frozen=True, slots=True)
class Row:
    index: int  # 1-based, in file order
    label: str  # the row's name, or "#<index>" when it has none
    expect: Expect
    seeds: tuple[int, ...]
    configs: tuple[RunConfig, ...]  # one per seed
    timeout_s: float


@dataclass(frozen=True, slots=True)
class Matrix:
    path: Path
    rows: tuple[Row, ...]


@dataclass(frozen=True, slots=True)
class RunRecord:
    seed: int
    exit_code: int  # the controller's (0 valid, 1 invalid, 2 unknown, 3 error) or the child's
    verdict: str  # valid, invalid, unknown, error, timeout, interrupted, crashed
    run_dir: Path | None
    report: Path | None
    duration_s: float
    error: str | None = None
    log: Path | None = None  # the child process's stdout/stderr


@dataclass(frozen=True, slots=True)
class RowResult:
    row: Row
    runs: tuple[RunRecord, ...]

    @property
    def met(self) -> bool:
        """Every seed ran and got the expected verdict. By verdict, not exit code: a child that
        crashed with a traceback exits 1 too, and must not pass for "violations found"."""
        want = EXPECTED_VERDICT[self.row.expect]
        return len(self.runs) == len(self.row.seeds) and all(
            r.verdict == want for r in self.runs
        )


@dataclass(frozen=True, slots=True)
class MatrixOutcome:
    rows: tuple[RowResult, ...]
    out_dir: Path
    compare_html: Path | None
    junit: Path | None
    report_error: str | None  # why the comparison report is missing, if it is
    interrupted: int | None  # the signal that stopped the matrix
    junit_error: str | None = None  # why the JUnit file asked for is missing, if it is

    @property
    def missed(self) -> tuple[RowResult, ...]:
        return tuple(r for r in self.rows if not r.met)

    @property
    def exit_code(self) -> int:
        if self.interrupted is not None:
            return 128 + self.interrupted
        if self.missed:
            return 1
        return 3 if self.junit_error else 0  # CI would read a pass it never got as missing


# ---- reading and validating -------------------------------------------------------------------


def _row_ref(index: int, raw: dict[str, Any]) -> str:
    name = raw.get("name")
    return f"row {name!r} (#{index})" if isinstance(name, str) and name else f"row #{index}"


def _field_error(e: ValidationError) -> str:
    err = e.errors()[0]
    loc = err["loc"]
    field = str(loc[0]) if loc else "row"
    got = f"{err['input']!r}: " if len(loc) > 1 else ""  # an item of a list: show which
    return f"{field}: {got}{err['msg'].removeprefix('Value error, ')}"


def _split_nemesis(value: Any) -> Any:
    if isinstance(value, str):
        return tuple(x.strip() for x in value.split(",") if x.strip())
    return value


def _build_row(index: int, raw: dict[str, Any], store: Path, runnable: bool = True) -> Row:
    for key, why in RESERVED.items():
        if key in raw:
            raise ValueError(f"{key}: not allowed in a row ({why})")
    known = [*_RowSpec.model_fields, *RunConfig.model_fields]
    unknown = sorted(set(raw) - set(known))
    if unknown:
        # Rows use the config's names (time_limit_s), not the CLI's (--time-limit).
        close = difflib.get_close_matches(unknown[0].replace("-", "_"), known, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise ValueError(f"{unknown[0]}: unknown field (not a run option nor name, expect, "
                         f"seeds, timeout_s){hint}")
    try:
        spec = _RowSpec(**raw)
    except ValidationError as e:
        raise ValueError(_field_error(e)) from None
    options = {k: v for k, v in raw.items() if k not in _RowSpec.model_fields}
    if "nemesis" in options:
        options["nemesis"] = _split_nemesis(options["nemesis"])
    configs = []
    for seed in spec.seeds:
        try:
            cfg = RunConfig(**options, name=spec.name, seed=seed, store=store)
            if runnable:
                wiring.check_compatible(cfg)
        except ValidationError as e:
            raise ValueError(_field_error(e)) from None
        except ConfigError as e:
            raise ValueError(str(e).removeprefix("bad configuration: ")) from None
        configs.append(cfg)
    timeout = spec.timeout_s or configs[0].time_limit_s + TIMEOUT_SLACK_S
    label = spec.name or f"#{index}"
    return Row(index, label, spec.expect, spec.seeds, tuple(configs), timeout)


def load_matrix(path: Path, store: Path, only: Sequence[str] = (),
                runnable: bool = True) -> Matrix:
    """Read and validate a matrix file; every error names the file, the row and the field.
    runnable=False skips what only running needs (client programs built, backend and fault
    support): a merge reads the rows on a machine that runs none of them."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise MatrixError(f"{path}: cannot read: {e.strerror or e}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise MatrixError(f"{path}: not valid TOML: {e}") from None
    extra = sorted(set(data) - {"defaults", "row"})
    if extra:
        raise MatrixError(f"{path}: unknown top-level key {extra[0]!r} (expected [defaults] "
                          "and [[row]] tables)")
    defaults = data.get("defaults", {})
    raw_rows = data.get("row", [])
    if not isinstance(defaults, dict):
        raise MatrixError(f"{path}: defaults: must be a table ([defaults])")
    if "name" in defaults:
        raise MatrixError(f"{path}: defaults: name: a name belongs to one row")
    if not isinstance(raw_rows, list) or not all(isinstance(r, dict) for r in raw_rows):
        raise MatrixError(f"{path}: row: must be an array of tables ([[row]])")
    if not raw_rows:
        raise MatrixError(f"{path}: no rows (add [[row]] tables)")
    rows: list[Row] = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(raw_rows, start=1):
        merged = {**defaults, **raw}
        ref = _row_ref(i, raw)
        try:
            row = _build_row(i, merged, store, runnable)
        except ValueError as e:
            raise MatrixError(f"{path}: {ref}: {e}") from None
        if row.label in seen:
            raise MatrixError(f"{path}: {ref}: name: already used by row #{seen[row.label]}")
        seen[row.label] = i
        rows.append(row)
    wanted = [n.strip() for item in only for n in item.split(",") if n.strip()]
    if wanted:
        missing = [n for n in wanted if n not in seen]
        if missing:
            raise MatrixError(f"--only: no row named {missing[0]!r} in {path} (rows: "
                              f"{', '.join(seen)})")
        rows = [r for r in rows if r.label in wanted]
    return Matrix(path, tuple(rows))


# ---- running ----------------------------------------------------------------------------------

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
    argv = [sys.executable, "-m", "fencecheck.fleet.matrix", str(cfg_path), str(result_path)]
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
    """Run every row (with jobs > 1, up to `jobs` weight units of runs at once, started in row
    order: see `parallel`), then write the comparison report and JUnit XML (if asked). The
    results are in row and seed order whatever order the runs end in, so every file written is
    the same as with jobs=1."""
    notify = notify or (lambda row, seed, rec: None)
    out_dir.mkdir(parents=True, exist_ok=True)
    tasks = [(row, seed, cfg) for row in matrix.rows
             for seed, cfg in zip(row.seeds, row.configs, strict=True)]
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
    time is its time limit, its CPU a fraction of one core), so two units per core; measured
    in benchmarks/bench_matrix.py."""
    return max(1, 2 * (cores or os.cpu_count() or 1))


# ---- output -----------------------------------------------------------------------------------

def write_compare(results: Sequence[RowResult], out_dir: Path) -> tuple[Path | None, str | None]:
    """reports.compare over this matrix's runs, each configuration judged by its row's
    expectation, with the rows themselves first."""
    from fencecheck.reports.compare import ExpectedRow, compare
    from fencecheck.reports.rundata import ReportError

    run_dirs = [r.run_dir for rr in results for r in rr.runs
                if r.run_dir is not None and (r.run_dir / "test.json").is_file()]
    if not run_dirs:
        return None, "no run produced a run directory"
    rows = [ExpectedRow(
        label=rr.row.label, expect=rr.row.expect, met=rr.met,
        verdicts=", ".join(r.verdict for r in rr.runs) or "not run",
        links=tuple((f"seed {r.seed}", r.report or r.run_dir) for r in rr.runs
                    if r.run_dir is not None),
    ) for rr in results]
    expectations = {rr.row.configs[0].test_name: rr.row.expect for rr in results}
    try:
        html_path, _csv = compare(run_dirs, out_dir, expectations=expectations,
                                  expected_rows=rows)
    except (ReportError, OSError) as e:
        log.warning("comparison report failed: %s", e)
        return None, str(e)
    return html_path, None


def junit_cases(results: Sequence[RowResult]) -> list[Case]:
    """One case per seed of each row, classname = the row, name = `seed <n>`: it passes when the
    run met the row's expectation (a must-find run that found violations passes)."""
    cases: list[Case] = []
    for rr in results:
        made = {r.seed: r for r in rr.runs}
        for seed in rr.row.seeds:
            rec = made.get(seed)
            name, expect = f"seed {seed}", rr.row.expect
            if rec is None:
                cases.append(Case(rr.row.label, name, "not-run", expect,
                                  detail="not run (interrupted)"))
            elif rec.run_dir is not None and rec.verdict in JUDGED:
                cases.append(case_of_run(rec.run_dir, classname=rr.row.label, name=name,
                                         expect=expect, duration_s=rec.duration_s,
                                         exit_code=rec.exit_code))
            else:
                cases.append(Case(rr.row.label, name, rec.verdict, expect, rec.duration_s,
                                  rec.exit_code, (("seed", str(seed)),),
                                  detail=rec.error or "",
                                  where=str(rec.report or rec.run_dir or rec.log or "")))
    return cases


def write_junit(results: Sequence[RowResult], path: Path, suite: str) -> None:
    """The matrix's JUnit file, through the one writer of reports.junit."""
    write_cases(junit_cases(results), path, suite)


def write_matrix_json(outcome: MatrixOutcome, path: Path) -> None:
    from fencecheck.records import matrix as matrix_record
    from fencecheck.records.matrix import MatrixRecord, MatrixRow, MatrixRun

    matrix_record.write(path, MatrixRecord(
        exit_code=outcome.exit_code,
        compare=str(outcome.compare_html) if outcome.compare_html else None,
        rows=[MatrixRow(
            row=rr.row.label, expect=rr.row.expect, met=rr.met,
            runs=[MatrixRun(seed=r.seed, exit_code=r.exit_code, verdict=r.verdict,
                            run_dir=str(r.run_dir) if r.run_dir else None,
                            report=str(r.report) if r.report else None,
                            duration_s=r.duration_s, error=r.error) for r in rr.runs],
        ) for rr in outcome.rows],
    ))


# ---- the child process: one run ---------------------------------------------------------------


def _child(argv: Sequence[str]) -> int:
    """`python -m fencecheck.fleet.matrix CONFIG.json RESULT.json`: one run through the controller;
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
