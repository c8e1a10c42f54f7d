"""`fencecheck shrink RUN_DIR`: reduce the fault schedule of a run that found violations to a
smallest one that still finds the same kind, by delta debugging (Zeller's ddmin) with real reruns.

A candidate is a subset of the recorded steps (fencecheck/nemesis/schedule.py), each remaining
fault kept
at its recorded time: a removed step's gap and hold are added to the next step's gap. A real
system is not deterministic, so a candidate is tried up to `tries` times and "still fails" means
one try found a violation of a kind the original run found; a candidate that never does is
taken as passing (this can keep a step that is not needed: never one that is). Every try is a
real `fencecheck run --replay` in a child process, kept in the store. The search stops when the
time budget is spent, with the smallest failing schedule found so far.

What is written (`out`): `schedule.json` and `test.json` (a replayable run folder: `fencecheck
run --replay OUT`), and `shrink.json`: the original steps, each ddmin step (what it removed or
kept, each try's run folder and verdict) and the result.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from msgspec import UNSET
from msgspec.structs import replace

from fencecheck.nemesis.schedule import Step, load_steps, write_steps
from fencecheck.records import results as results_record
from fencecheck.records import test as test_record
from fencecheck.records.base import RecordError
from fencecheck.run.config import ConfigError

T = TypeVar("T")
RUN_SLACK_S = 240.0  # setup, teardown, check and report on top of a run's time limit


class BudgetSpent(Exception):
    """The time budget ran out: keep the best schedule found so far."""


def subset(steps: Sequence[Step], keep: Sequence[int]) -> list[Step]:
    """The steps at indices `keep` (sorted), each at its recorded time: the gap and hold of every
    removed step before a kept one are added to that one's gap."""
    out: list[Step] = []
    carry = 0.0
    wanted = set(keep)
    for i, st in enumerate(steps):
        if i in wanted:
            out.append(replace(st, gap_s=round(carry + st.gap_s, 3)))
            carry = 0.0
        else:
            carry += st.gap_s + st.hold_s
    return out


def ddmin(items: list[int], fails: Callable[[list[int]], bool]) -> list[int]:
    """Zeller's ddmin: a 1-minimal subset of `items` for which `fails` holds (it holds for
    `items`). BudgetSpent from `fails` ends the search with the smallest failing set so far."""
    n = 2
    try:
        while len(items) >= 2:
            size = len(items) / n
            chunks = [items[round(k * size):round((k + 1) * size)] for k in range(n)]
            chunks = [c for c in chunks if c]
            for c in chunks:
                if fails(c):
                    items, n = c, 2
                    break
            else:
                for c in chunks:
                    rest = [x for x in items if x not in c]
                    if len(chunks) > 2 and fails(rest):
                        items, n = rest, max(n - 1, 2)
                        break
                else:
                    if n >= len(items):
                        break
                    n = min(len(items), 2 * n)
    except BudgetSpent:
        pass
    return items


@dataclass
class Shrinker:
    """Runs candidates of one recorded run; `log` is every try, in order."""

    run_dir: Path
    store: Path
    out: Path
    tries: int = 3
    budget_s: float = 1800.0
    kinds: frozenset[str] = frozenset()
    steps: tuple[Step, ...] = ()
    log: list[dict[str, Any]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    time_limit_s: float = 30.0

    def load(self) -> None:
        self.kinds = _read(results_record.read, self.run_dir / "results.json").kinds()
        if not self.kinds:
            raise ConfigError(f"shrink: {self.run_dir} found no violations: nothing to shrink")
        test_json = self.run_dir / "test.json"
        limit = _read(test_record.read, test_json).settings.time_limit_s
        if limit is UNSET:
            raise ConfigError(f"shrink: {test_json}: config.time_limit_s: missing")
        self.time_limit_s = limit
        self.steps = load_steps(self.run_dir / "schedule.json")
        if not self.steps:
            raise ConfigError(f"shrink: {self.run_dir}: its schedule has no faults")

    def _candidate(self, keep: Sequence[int]) -> Path:
        """A folder --replay accepts: the recorded test.json and the candidate's schedule."""
        d = self.out / "candidates" / f"{len(self.log) + 1:03d}"
        d.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.run_dir / "test.json", d / "test.json")
        write_steps(d / "schedule.json", subset(self.steps, keep))
        return d

    def fails(self, keep: list[int]) -> bool:
        """Whether the schedule of `keep` finds a violation of the original's kinds in one of
        up to `tries` real runs."""
        cand = self._candidate(keep)
        for attempt in range(1, self.tries + 1):
            left = self.budget_s - (time.monotonic() - self.started)
            if left < self.time_limit_s + 10:
                raise BudgetSpent
            code, run, kinds = self._run(cand, min(left, self.time_limit_s + RUN_SLACK_S))
            found = bool(kinds & self.kinds)
            self.log.append({"keep": keep, "try": attempt, "exit_code": code,
                             "run_dir": str(run) if run else None, "kinds": sorted(kinds),
                             "same_kind": found})
            if found:
                return True
        return False

    def _run(self, cand: Path, timeout_s: float) -> tuple[int, Path | None, frozenset[str]]:
        argv = [sys.executable, "-m", "fencecheck", "run", "--replay", str(cand),
                "--store", str(self.store)]
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                               env={**os.environ, "COLUMNS": "500"})
        except subprocess.TimeoutExpired:
            return -1, None, frozenset()
        if "run directory:" not in r.stdout:
            return r.returncode, None, frozenset()
        run = Path(r.stdout.split("run directory:")[1].split()[0])
        try:
            results = _read(results_record.read, run / "results.json")
        except ConfigError:
            return r.returncode, run, frozenset()
        return r.returncode, run, results.kinds()

    def shrink(self) -> list[int]:
        self.out.mkdir(parents=True, exist_ok=True)
        keep = ddmin(list(range(len(self.steps))), self.fails)
        shutil.copy(self.run_dir / "test.json", self.out / "test.json")
        write_steps(self.out / "schedule.json", subset(self.steps, keep))
        spent = time.monotonic() - self.started
        summary = {
            "run_dir": str(self.run_dir), "kinds": sorted(self.kinds),
            "original_faults": len(self.steps), "shrunk_faults": len(keep), "kept": keep,
            "removed": [i for i in range(len(self.steps)) if i not in keep],
            "tries": self.log, "spent_s": round(spent, 1),
            "budget_spent": spent >= self.budget_s - self.time_limit_s - 10,
            "confirming_run": next((t["run_dir"] for t in reversed(self.log)
                                    if t["same_kind"] and t["keep"] == keep), None),
        }
        (self.out / "shrink.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
        return keep


def _read(read: Callable[[Path], T], path: Path) -> T:
    """A record file of the run; ConfigError (one line, exit 3) if it is missing or bad."""
    try:
        return read(path)
    except RecordError as e:
        raise ConfigError(f"shrink: {e}") from None
