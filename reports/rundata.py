"""Reading a run directory: test.json, results.json, the history's ops, node logs.

`load_run(run_dir)` gathers what the report, the comparison matrix and JUnit output need.
`find_runs(paths)` expands stores into run directories. test.json and results.json are read
through their records (fencecheck.records), which also read the files older releases wrote; a
file that is not as specified is a ReportError naming the field.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from msgspec import UNSET

from fencecheck.checker.base import CheckerError, Op
from fencecheck.records import results as results_record
from fencecheck.records import test as test_record
from fencecheck.records.base import RecordError
from fencecheck.records.results import Results, Violation
from fencecheck.records.test import RunSettings, TestRecord

log = logging.getLogger(__name__)

RUN_DIR_NAME = re.compile(r"^\d{8}T\d{6}")
T = TypeVar("T")


class ReportError(Exception):
    """Root error of the reports package: bad input the user must fix (exit 3)."""


@dataclass(frozen=True, slots=True)
class RunData:
    """Everything read from one run directory."""

    run_dir: Path
    test: TestRecord  # empty where the folder has no test.json
    results: Results | None  # None when results.json is missing and no checker ran
    ops: tuple[Op, ...]
    logs: tuple[Path, ...]  # node and controller logs, relative to run_dir

    @property
    def name(self) -> str:
        name = "" if self.test.name is UNSET else self.test.name
        return name or self.run_dir.parent.name or self.run_dir.name

    @property
    def config(self) -> dict[str, Any]:
        """The whole configuration as recorded (RunConfig's fields)."""
        return self.test.config

    @property
    def settings(self) -> RunSettings:
        """The configuration's fields that reports interpret, typed."""
        return self.test.settings

    @property
    def verdict(self) -> str:
        """"valid", "invalid", "unknown" or "no results"."""
        return verdict_of(self.results)

    @property
    def violations(self) -> list[tuple[str, Violation]]:
        return violations_of(self.results)


def verdict_of(results: Results | None) -> str:
    if results is None:
        return "no results"
    if results.valid is True:
        return "valid"
    if results.valid is False:
        return "invalid"
    return "unknown"


def violations_of(results: Results | None) -> list[tuple[str, Violation]]:
    """Every violation of every check, with its check's name."""
    return [] if results is None else results.violations()


def violation_counts(results: Results | None) -> dict[str, int]:
    """Violations by kind, all of them: a check lists at most 100 but counts every one in its
    "count_by_kind" (the listed ones are counted where a check gives no such count)."""
    counts: dict[str, int] = {}
    for check in (results.checks if results is not None else {}).values():
        if check.count_by_kind is not UNSET:
            for kind, n in check.count_by_kind.items():
                counts[kind] = counts.get(kind, 0) + n
        else:
            for v in check.violations:
                counts[v.kind] = counts.get(v.kind, 0) + 1
    return counts


def _read(path: Path, read: Callable[[Path], T]) -> T:
    try:
        return read(path)
    except RecordError as e:
        raise ReportError(str(e)) from e


def read_test(path: Path) -> TestRecord:
    """A test.json; ReportError (naming the file and the field) if it is not one."""
    return _read(path, test_record.read)


def read_results(path: Path) -> Results:
    """A results.json; ReportError (naming the file and the field) if it is not one."""
    return _read(path, results_record.read)


def load_ops(history: Path) -> list[Op]:
    """The paired ops of a history file; a malformed history becomes a ReportError."""
    from fencecheck.checker.history import load_ops as checker_load_ops

    try:
        return checker_load_ops(history)
    except CheckerError as e:
        raise ReportError(str(e)) from e


def _analyze(ops: Sequence[Op]) -> Results | None:
    """Results from the checker when a run has a history but no results.json."""
    try:
        from fencecheck.checker.verdict import judge
    except ImportError:  # the checker is optional for reading reports of finished runs
        return None
    return judge(ops, time_limit_s=60.0).record()


def log_files(run_dir: Path) -> tuple[Path, ...]:
    """nodes/<node>/* and fencecheck.log, relative to run_dir, sorted."""
    found: list[Path] = []
    top = run_dir / "fencecheck.log"
    if top.is_file():
        found.append(Path("fencecheck.log"))
    nodes = run_dir / "nodes"
    if nodes.is_dir():
        for root, dirs, files in os.walk(nodes):
            dirs.sort()
            for f in sorted(files):
                p = Path(root) / f
                if f.endswith((".log", ".out", ".err", ".txt")) or "log" in f:
                    found.append(p.relative_to(run_dir))
    return tuple(found)


def load_run(run_dir: Path, *, with_ops: bool = True) -> RunData:
    """Read a run directory. Needs history.jsonl (when with_ops) or results.json."""
    run_dir = run_dir.resolve()
    if not run_dir.is_dir():
        raise ReportError(f"{run_dir}: not a directory")
    history = run_dir / "history.jsonl"
    results_path = run_dir / "results.json"
    test_path = run_dir / "test.json"
    if not history.is_file() and not results_path.is_file():
        raise ReportError(f"{run_dir}: no history.jsonl or results.json: not a run directory")
    test = read_test(test_path) if test_path.is_file() else TestRecord()
    results = read_results(results_path) if results_path.is_file() else None
    ops: list[Op] = []
    if with_ops and history.is_file():
        ops = load_ops(history)
        if results is None:
            results = _analyze(ops)
    return RunData(run_dir, test, results, tuple(ops), log_files(run_dir))


def find_runs(paths: Iterable[Path]) -> list[Path]:
    """Run directories in paths: each path is a run dir or a store searched for test.json.

    `latest` links are skipped so that a run is found once."""
    runs: list[Path] = []
    seen: set[Path] = set()
    for path in paths:
        if not path.exists():
            raise ReportError(f"{path}: no such file or directory")
        if not path.is_dir():
            raise ReportError(f"{path}: not a directory")
        if (path / "test.json").is_file() or (path / "history.jsonl").is_file():
            candidates = [path]
        else:
            candidates = []
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if d != "latest" and not d.startswith("_"))
                if "test.json" in files:
                    candidates.append(Path(root))
                    dirs[:] = []
        for c in candidates:
            r = c.resolve()
            if r not in seen:
                seen.add(r)
                runs.append(r)
    return runs


def store_of(run_dir: Path) -> Path | None:
    """The store holding run_dir (store/<test>/<timestamp>/), or None for a loose run dir."""
    run_dir = run_dir.resolve()
    if RUN_DIR_NAME.match(run_dir.name) and run_dir.parent != run_dir.parent.parent:
        return run_dir.parent.parent
    return None
