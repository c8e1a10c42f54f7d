"""Sharding a matrix over N machines, and merging their results into the one matrix.

`--shard I/N` (I in 0..N-1, so that a Kubernetes Indexed Job's JOB_COMPLETION_INDEX is the shard
as it is) picks a deterministic, balanced 1/N of the matrix's runs (row × seed): runs are
assigned longest first to the least loaded shard (LPT), by expected run time, the row's time
limit plus a setup estimate for its backend and client. Every shard computes the same plan from
the same file, so the shards together run every row × seed exactly once.

Each shard writes `shard.json` next to its matrix.json: the matrix file's hash, I/N, the runs it
was given and the records of those it ran (run folders relative to the manifest, so that a CI
artifact downloaded elsewhere still resolves). `merge` reads the manifests of all N shards, checks
that they come from this matrix file and that none is missing, and writes the comparison, JUnit
and matrix.json of the whole matrix through the same writers as an unsharded run.
"""

from __future__ import annotations

import hashlib
import heapq
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fencecheck.fleet.matrix import (
    Matrix,
    MatrixError,
    MatrixOutcome,
    Row,
    RowResult,
    RunRecord,
)
from fencecheck.fleet.outputs import write_compare, write_junit, write_matrix_json
from fencecheck.records import shard as shard_record
from fencecheck.records.base import RecordError
from fencecheck.records.shard import SHARD_FORMAT, ShardManifest, ShardRun

MANIFEST = "shard.json"
FORMAT = SHARD_FORMAT
# Seconds on top of the time limit: cluster up and down, check and report. Rough figures from
# this machine's runs; they only need to rank runs, not predict them.
SETUP_S: dict[str, float] = {"redis": 4.0, "redlock": 6.0, "redis-sentinel": 10.0, "etcd": 6.0,
                             "zookeeper": 12.0, "postgres": 8.0}
DEFAULT_SETUP_S = 8.0
CLIENT_SETUP_S: dict[str, float] = {"curator": 10.0}  # a JVM per worker
_SHARD = re.compile(r"^(\d+)/(\d+)$")


@dataclass(frozen=True, slots=True, order=True)
class Shard:
    index: int  # 0-based
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """`I/N` with 0 <= I < N; anything else is a one-line MatrixError."""
    m = _SHARD.match(text.strip())
    if not m:
        raise MatrixError(f"--shard: expected I/N (e.g. 0/3), got {text!r}")
    index, count = int(m.group(1)), int(m.group(2))
    if count < 1 or index >= count:
        raise MatrixError(f"--shard: {text!r}: I must be in 0..N-1 and N at least 1")
    return Shard(index, count)


def expected_s(row: Row) -> float:
    """A run's expected wall time: its time limit plus setup for its backend and client."""
    cfg = row.configs[0]
    return (cfg.time_limit_s + SETUP_S.get(cfg.backend, DEFAULT_SETUP_S)
            + CLIENT_SETUP_S.get(str(cfg.client), 0.0))


def plan(rows: Sequence[Row], count: int) -> list[list[tuple[str, int]]]:
    """The runs (row label, seed) of each of `count` shards: longest first onto the least
    loaded shard; ties by file order and lower shard index, so every machine gets the same plan."""
    runs = [(expected_s(r), r.index, seed, r.label) for r in rows for seed in r.seeds]
    runs.sort(key=lambda x: (-x[0], x[1], x[2]))
    loads = [(0.0, i) for i in range(count)]
    heapq.heapify(loads)
    shards: list[list[tuple[str, int]]] = [[] for _ in range(count)]
    for cost, _index, seed, label in runs:
        load, i = heapq.heappop(loads)
        shards[i].append((label, seed))
        heapq.heappush(loads, (load + cost, i))
    order = {(r.label, s): (r.index, k) for r in rows for k, s in enumerate(r.seeds)}
    return [sorted(s, key=order.__getitem__) for s in shards]


def select(matrix: Matrix, shard: Shard) -> Matrix:
    """The matrix cut to one shard's runs: rows keep their index and label, with only the
    seeds (and configs) this shard runs; rows with none are left out."""
    mine = set(plan(matrix.rows, shard.count)[shard.index])
    rows = []
    for row in matrix.rows:
        keep = [(s, c) for s, c in zip(row.seeds, row.configs, strict=True)
                if (row.label, s) in mine]
        if keep:
            rows.append(replace(row, seeds=tuple(s for s, _ in keep),
                                configs=tuple(c for _, c in keep)))
    return Matrix(matrix.path, tuple(rows))


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---- the manifest ----------------------------------------------------------------------------


def _rel(path: Path | None, base: Path) -> str | None:
    if path is None:
        return None
    return Path(os.path.relpath(path.resolve(), base.resolve())).as_posix()


def write_manifest(outcome: MatrixOutcome, matrix: Matrix, shard: Shard) -> Path:
    """shard.json in the shard's output folder."""
    base = outcome.out_dir
    rec = ShardManifest(
        matrix=matrix.path.name,
        matrix_sha256=file_hash(matrix.path),
        shard=shard.index,
        of=shard.count,
        assigned=[(r.label, s) for r in matrix.rows for s in r.seeds],
        interrupted=outcome.interrupted,
        runs=[ShardRun(
            row=rr.row.label, seed=r.seed, exit_code=r.exit_code, verdict=r.verdict,
            run_dir=_rel(r.run_dir, base), report=_rel(r.report, base),
            log=_rel(r.log, base), duration_s=r.duration_s, error=r.error,
        ) for rr in outcome.rows for r in rr.runs],
    )
    path = base / MANIFEST
    shard_record.write(path, rec)
    return path


def _resolve(base: Path, rel: Any) -> Path | None:
    return (base / rel).resolve() if isinstance(rel, str) else None


def find_manifests(paths: Iterable[Path]) -> list[Path]:
    """Every shard.json in or under the given folders (CI artifacts, stores, output folders)."""
    found: list[Path] = []
    for p in paths:
        if p.is_file() and p.name == MANIFEST:
            found.append(p)
        elif p.is_dir():
            found.extend(sorted(p.rglob(MANIFEST)))
        else:
            raise MatrixError(f"{p}: no such folder (expected a shard's store or output)")
    return found


def _load(path: Path) -> ShardManifest:
    try:
        return shard_record.read(path)
    except RecordError as e:
        raise MatrixError(f"{e} (not a readable shard manifest)") from None


def merge_results(matrix: Matrix, paths: Sequence[Path]) -> list[RowResult]:
    """The whole matrix's row results from its shards' manifests. Refused (MatrixError, one
    line): a manifest of another matrix file, two of one shard, a missing shard."""
    want = file_hash(matrix.path)
    manifests = find_manifests(paths)
    if not manifests:
        raise MatrixError(f"no {MANIFEST} under {', '.join(map(str, paths))} "
                          "(run `fencecheck matrix FILE --shard I/N` first)")
    seen: dict[int, Path] = {}
    count: int | None = None
    records: dict[tuple[str, int], RunRecord] = {}
    for path in manifests:
        data = _load(path)
        if data.matrix_sha256 != want:
            raise MatrixError(f"{path}: shard of another matrix file than {matrix.path} "
                              "(its hash differs)")
        index, of = data.shard, data.of
        if count is not None and of != count:
            raise MatrixError(f"{path}: shard {index}/{of}, but other shards are of {count}")
        count = of
        if index in seen:
            raise MatrixError(f"shard {index}/{of} given twice: {seen[index]} and {path}")
        seen[index] = path
        base = path.parent
        for r in data.runs:
            records[(r.row, r.seed)] = RunRecord(
                r.seed, r.exit_code, r.verdict, _resolve(base, r.run_dir),
                _resolve(base, r.report), r.duration_s, r.error,
                _resolve(base, r.log if isinstance(r.log, str) else None))
    assert count is not None
    missing = sorted(set(range(count)) - set(seen))
    if missing:
        names = ", ".join(f"{i}/{count}" for i in missing)
        raise MatrixError(f"shard {names} missing: no {MANIFEST} for it under "
                          f"{', '.join(map(str, paths))}")
    return [RowResult(row, tuple(records[(row.label, s)] for s in row.seeds
                                 if (row.label, s) in records)) for row in matrix.rows]


def merge_shards(matrix: Matrix, paths: Sequence[Path], out_dir: Path,
          junit: Path | None = None) -> MatrixOutcome:
    """Write the whole matrix's comparison, JUnit and matrix.json from its shards."""
    results = merge_results(matrix, paths)
    out_dir.mkdir(parents=True, exist_ok=True)
    compare_html, report_error = write_compare(results, out_dir)
    junit_error = None
    if junit is not None:
        try:
            write_junit(results, junit, f"fencecheck matrix {matrix.path.stem}")
        except OSError as e:
            junit_error = f"{junit}: {e.strerror or e}"
    outcome = MatrixOutcome(tuple(results), out_dir, compare_html,
                            None if junit_error else junit, report_error, None, junit_error)
    write_matrix_json(outcome, out_dir / "matrix.json")
    return outcome
