"""`fencecheck matrix`: many runs from one TOML file, each row with an expected outcome.

A matrix file has an optional `[defaults]` table and `[[row]]` tables. A row holds any option of
`RunConfig` (backend, client, resource, nemesis, fencing, time_limit_s, workload, each owner's
`*_options` table, or their flat aliases such as think_ms and persistence) plus
`name`, `seeds` (one run per seed), `expect` ("must-find": every run finds violations, exit 1;
"must-pass": every run is valid, exit 0) and `timeout_s` (a run past it is stopped: missed).
`load_matrix` validates every row before anything runs (`MatrixError` names file, row and field).
This module holds the rows and their outcome types (`Row`, `RunRecord`, `RowResult`,
`MatrixOutcome`) and their loading. `fencecheck.fleet.runs.run_matrix` runs rows in order, each
run in a child process of its own (a crashing or hung run cannot take the matrix down, and the
controller's signal handling stays per run), then hands the rows to the writers of
`fencecheck.fleet.outputs`: the comparison (`reports.compare`: each configuration judged by its
row's expectation, the rows first) and JUnit XML (`reports.junit`: a case per row and seed that
passes when its run met the row's expectation).
"""

from __future__ import annotations

import difflib
import logging
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from fencecheck.run import wiring
from fencecheck.run.config import ConfigError, RunConfig
from fencecheck.run.options import ALIASES

log = logging.getLogger(__name__)

Expect = Literal["must-find", "must-pass"]
EXPECTED_VERDICT: dict[str, str] = {"must-find": "invalid", "must-pass": "valid"}
VERDICT_OF_EXIT: dict[int, str] = {0: "valid", 1: "invalid", 2: "unknown", 3: "error"}
JUDGED = ("valid", "invalid", "unknown")  # the checker ran: a miss is a failure, not an error
# Keys a row may not set: the matrix owns them (--store, seeds, the row's name).
RESERVED = {"store": "set by --store", "seed": "use seeds = [...]"}
TIMEOUT_SLACK_S = 300.0  # setup, teardown, check and report on top of the time limit


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
    known = [*_RowSpec.model_fields, *RunConfig.model_fields, *ALIASES]
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
    support): a merge reads the rows on a machine that runs none of them; so do the rows that
    `only` leaves out (another row's unbuilt client does not refuse the one asked for)."""
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
    wanted = [n.strip() for item in only for n in item.split(",") if n.strip()]
    for i, raw in enumerate(raw_rows, start=1):
        merged = {**defaults, **raw}
        ref = _row_ref(i, raw)
        runs = runnable and (not wanted or str(raw.get("name") or f"#{i}") in wanted)
        try:
            row = _build_row(i, merged, store, runs)
        except ValueError as e:
            raise MatrixError(f"{path}: {ref}: {e}") from None
        if row.label in seen:
            raise MatrixError(f"{path}: {ref}: name: already used by row #{seen[row.label]}")
        seen[row.label] = i
        rows.append(row)
    if wanted:
        missing = [n for n in wanted if n not in seen]
        if missing:
            raise MatrixError(f"--only: no row named {missing[0]!r} in {path} (rows: "
                              f"{', '.join(seen)})")
        rows = [r for r in rows if r.label in wanted]
    return Matrix(path, tuple(rows))


