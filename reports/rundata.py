"""Reading a run directory: test.json, results.json, the history's ops, node logs.

`load_run(run_dir)` gathers what the report, the comparison matrix and JUnit output need.
`find_runs(paths)` expands stores into run directories. Results stay plain JSON dicts (the
results.json contract of DESIGN.md) so reports also read results written by older checkers.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fencecheck.checker.base import CheckerError, Op

log = logging.getLogger(__name__)

RUN_DIR_NAME = re.compile(r"^\d{8}T\d{6}")


class ReportError(Exception):
    """Root error of the reports package: bad input the user must fix (exit 3)."""


@dataclass(frozen=True, slots=True)
class RunData:
    """Everything read from one run directory."""

    run_dir: Path
    test: dict[str, Any]
    results: dict[str, Any] | None  # None when results.json is missing and no checker ran
    ops: tuple[Op, ...]
    logs: tuple[Path, ...]  # node and controller logs, relative to run_dir

    @property
    def name(self) -> str:
        return str(self.test.get("name") or self.run_dir.parent.name or self.run_dir.name)

    @property
    def config(self) -> dict[str, Any]:
        cfg = self.test.get("config")
        return cfg if isinstance(cfg, dict) else {}

    @property
    def verdict(self) -> str:
        """"valid", "invalid", "unknown" or "no results"."""
        return verdict_of(self.results)

    @property
    def violations(self) -> list[dict[str, Any]]:
        return violations_of(self.results)


def verdict_of(results: dict[str, Any] | None) -> str:
    if results is None:
        return "no results"
    valid = results.get("valid")
    if valid is True:
        return "valid"
    if valid is False:
        return "invalid"
    return "unknown"


def violations_of(results: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Every violation of every check, each with its check's name under "check"."""
    out: list[dict[str, Any]] = []
    if results is None:
        return out
    checks = results.get("checks")
    if not isinstance(checks, dict):
        return out
    for name, check in checks.items():
        if not isinstance(check, dict):
            continue
        for v in check.get("violations") or []:
            if isinstance(v, dict):
                out.append({"check": name, **v})
    return out


def violation_counts(results: dict[str, Any] | None) -> dict[str, int]:
    """Violations by kind, all of them: a check lists at most 100 but counts every one in its
    "count_by_kind" (the listed ones are counted where a check gives no such count)."""
    counts: dict[str, int] = {}
    checks = (results or {}).get("checks") or {}
    for check in checks.values():
        if not isinstance(check, dict):
            continue
        by_kind = check.get("count_by_kind")
        if isinstance(by_kind, dict):
            for kind, n in by_kind.items():
                if isinstance(n, int):
                    counts[str(kind)] = counts.get(str(kind), 0) + n
        else:
            for v in check.get("violations") or []:
                if isinstance(v, dict):
                    kind = str(v.get("kind", "?"))
                    counts[kind] = counts.get(kind, 0) + 1
    return counts


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ReportError(f"{path}: cannot read: {e.strerror or e}") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ReportError(f"{path}: not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise ReportError(f"{path}: expected a JSON object")
    return data


def load_ops(history: Path) -> list[Op]:
    """The paired ops of a history file; a malformed history becomes a ReportError."""
    from fencecheck.checker.history import load_ops as checker_load_ops

    try:
        return checker_load_ops(history)
    except CheckerError as e:
        raise ReportError(str(e)) from e


def _analyze(ops: Sequence[Op]) -> dict[str, Any] | None:
    """Results from the checker when a run has a history but no results.json."""
    try:
        from fencecheck.checker.verdict import judge
    except ImportError:  # the checker is optional for reading reports of finished runs
        return None
    return judge(ops, time_limit_s=60.0).to_json()


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
    test = read_json(test_path) if test_path.is_file() else {}
    results = read_json(results_path) if results_path.is_file() else None
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
