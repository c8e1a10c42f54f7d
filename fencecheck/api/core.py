"""The Python API's implementation (the names are exported by `fencecheck.api`, which loads this
module only when one of them is first used)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msgspec import UNSET

from fencecheck.api.recorder import HistoryRecorder
from fencecheck.api.values import RecorderError
from fencecheck.checker.base import CheckerError, Results
from fencecheck.run.errors import ConfigError

__all__ = [
    "CheckerError",
    "ConfigError",
    "HistoryRecorder",
    "RecorderError",
    "Result",
    "ScenarioError",
    "check_history",
    "run_scenario",
]

# Keys of a matrix row that belong to the matrix, not to one run.
_MATRIX_ONLY = {"expect": "a row's expectation: assert on result.valid instead",
                "seeds": "run_scenario runs one seed: pass seed=N"}
CHECK_TIME_LIMIT_S = 60.0  # `fencecheck check --time-limit`'s default, for the same verdict


class ScenarioError(Exception):
    """A scenario that could not run (setup failed, not root, timed out); one line."""


@dataclass(frozen=True, slots=True)
class Result:
    """The verdict on one history, wrapping the checker's `Results`.

    `valid` is True (no violation), False (violations found) or None (unknown: too thin a
    history, or a check ran out of time). `run_dir` and `seed` are set for `run_scenario`.
    """

    results: Results
    run_dir: Path | None = None
    seed: int | None = None

    @property
    def valid(self) -> bool | None:
        v = self.results.valid
        return v if isinstance(v, bool) else None

    @property
    def verdict(self) -> str:
        """"valid", "invalid" or "unknown", as the matrix and JUnit properties name it."""
        return {True: "valid", False: "invalid", None: "unknown"}[self.valid]

    @property
    def exit_code(self) -> int:
        """What `fencecheck check` exits with: 0 valid, 1 violations found, 2 unknown."""
        return self.results.exit_code

    @property
    def incidents(self) -> list[dict[str, Any]]:
        """The incidents of results.json: each stale grant with its fault, the next grant, the
        violations that follow from it, and a `story` paragraph."""
        return list(self.results.incidents)

    @property
    def violations(self) -> list[dict[str, Any]]:
        """Every violation of every check (results.json's), each with its `check` name added."""
        out: list[dict[str, Any]] = []
        for name, check in self.results.checks.items():
            out.extend({"check": name, **v.to_json()} for v in check.violations)
        return out

    def to_json(self) -> dict[str, Any]:
        """The results.json document."""
        return self.results.to_json()

    def summary(self, most: int = 5) -> str:
        """Plain text: the verdict, each check's outcome, and the first `most` incidents'
        stories (as `fencecheck check` prints them; the rest are counted)."""
        rec = self.results.record()
        head = {"valid": "VALID: no violation found", "invalid": "INVALID: violations found",
                "unknown": "UNKNOWN: the checks could not decide"}[self.verdict]
        lines = [head]
        if self.run_dir is not None:
            lines.append(f"run folder: {self.run_dir}")
        for name, check in rec.checks.items():
            n = len(check.violations)
            skipped = "" if check.skipped is UNSET else check.skipped
            state = ("skipped" if skipped and check.valid is True else "ok" if check.valid is True
                     else "violated" if check.valid is False else "unknown")
            note = f" ({skipped})" if skipped else ""
            lines.append(f"  {name}: {state}" + (f", {n} violation(s)" if n else "") + note)
        for inc in rec.incidents[:most]:
            lines.append(f"incident {inc.id}: {inc.story}")
        if len(rec.incidents) > most:
            lines.append(f"... and {len(rec.incidents) - most} more incidents "
                         "(Result.incidents, or results.json, has every one)")
        if not rec.incidents:  # violations outside any incident still need a sentence each
            lines.extend(f"{name}: {v.kind}: {v.explanation}"
                         for name, v in rec.violations()[:10])
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def check_history(source: str | os.PathLike[str] | Iterable[Mapping[str, Any]], *,
                  max_drift: float = 0.01, model: str | None = None, fmt: str | None = None,
                  time_limit_s: float | None = CHECK_TIME_LIMIT_S) -> Result:
    """Judge a history: a path to a file (history.jsonl, Jepsen EDN or Jepsen log lines), a run
    folder, or an iterable of event dicts (history.jsonl lines as dicts). The same verdict as
    `fencecheck check` with the same options (`model` as `--model`, `fmt` as `--format`,
    `time_limit_s` as `--time-limit`: past it the model check is unknown). Raises CheckerError
    (one line, `file:line:` for files) on bad input."""
    from fencecheck.checker.verdict import check_history as verdict_of

    if isinstance(source, os.PathLike):
        source = os.fspath(source)
    return Result(verdict_of(source, max_drift=max_drift, model=model, fmt=fmt,
                             time_limit_s=time_limit_s))


def run_scenario(**options: Any) -> Result:
    """Run one `fencecheck run` configuration and judge it. Options are named as in a matrix
    row (`backend`, `client`, `resource`, `nemesis`, `fencing`, `time_limit_s`, `lease_ms`,
    `seed`, `store`, ...; `nemesis` may be "pause,partition" or a list), plus `timeout_s` (past
    it the run is stopped, healed and torn down). Needs root. Raises ConfigError on a bad
    option, ScenarioError if the run could not start or finish; SIGINT/SIGTERM stop the run
    (it heals and tears down) and then raise KeyboardInterrupt."""
    # The matrix's way to run one configuration: a child process of its own (the controller
    # owns signals and root logging for the length of a run), signals passed on to it, and a
    # run past its timeout stopped with SIGTERM, then killed and torn down by its ledger.
    try:  # the `run` extra's packages (a core install has none of them)
        from fencecheck.fleet.matrix import JUDGED, TIMEOUT_SLACK_S
        from fencecheck.fleet.runs import _run_one, _Signals
        from fencecheck.run import wiring
        from fencecheck.run.config import make_config
    except ModuleNotFoundError as e:
        from fencecheck.descriptors.extras import missing_module_message

        raise ScenarioError(missing_module_message(e.name or str(e), "run_scenario")) from None

    options = dict(options)
    for key, why in _MATRIX_ONLY.items():
        if key in options:
            raise ConfigError(f"bad configuration: {key}: {why}")
    timeout_s = options.pop("timeout_s", None)
    if isinstance(options.get("nemesis"), str):
        options["nemesis"] = tuple(x.strip() for x in options["nemesis"].split(",") if x.strip())
    cfg = make_config(**options)
    wiring.check_compatible(cfg)
    if os.geteuid() != 0:
        raise ScenarioError("run_scenario needs root (network namespaces, iptables); "
                            "see `fencecheck doctor`")
    limit = float(timeout_s) if timeout_s is not None else cfg.time_limit_s + TIMEOUT_SLACK_S
    logs = Path(tempfile.mkdtemp(prefix="fencecheck-scenario-"))
    with _Signals() as sig:
        record = _run_one(cfg, cfg.test_name, limit, logs, sig)
    if sig.received is not None:
        raise KeyboardInterrupt(f"{cfg.test_name}: stopped by signal {sig.received}")
    if record.verdict not in JUDGED or record.run_dir is None:
        raise ScenarioError(f"{cfg.test_name}: {record.verdict}: {record.error}")
    shutil.rmtree(logs, ignore_errors=True)  # kept above: the error names the child's log
    result = check_history(record.run_dir, max_drift=cfg.max_drift)
    return Result(result.results, run_dir=record.run_dir, seed=cfg.seed)
