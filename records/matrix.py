"""matrix.json: what a `fencecheck matrix` (or `merge` of its shards) ran: each row's
expectation and whether it was met, each seed's run with its verdict, folder and report.

Written since the first matrix release with the same fields and no version, so a file without
`format_version` is format 1, and the writer leaves it out while it is 1. A row's label,
expectation and runs, and each run's seed and verdict, are required; the rest may be absent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from fencecheck.records.base import (
    RecordError,
    convert,
    decode_json,
    encode_json,
    read_bytes,
    schema_of,
    write_atomic,
)

MATRIX_FORMAT = 1


class MatrixRun(msgspec.Struct, kw_only=True):
    """One seed of a row: the controller's exit code and the verdict read from it (valid,
    invalid, unknown, error, timeout, interrupted, crashed)."""

    seed: int
    exit_code: int | UnsetType = UNSET
    verdict: str
    run_dir: str | None = None
    report: str | None = None
    duration_s: float | UnsetType = UNSET
    error: str | None = None


class MatrixRow(msgspec.Struct, kw_only=True):
    row: str  # the row's label
    expect: str
    met: bool
    runs: list[MatrixRun]


class MatrixRecord(msgspec.Struct, kw_only=True):
    format_version: int | UnsetType = UNSET  # absent: format 1
    exit_code: int | UnsetType = UNSET
    compare: str | None = None  # compare.html, where the comparison was written
    rows: list[MatrixRow]


def decode(data: bytes | str, where: str = "matrix.json") -> MatrixRecord:
    doc = decode_json(data, where)
    if not isinstance(doc, dict):
        raise RecordError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    rec = convert(doc, MatrixRecord, where)
    if rec.format_version is not UNSET and rec.format_version != MATRIX_FORMAT:
        raise RecordError(f"{where}: format_version {rec.format_version}: this fencecheck "
                          f"reads format {MATRIX_FORMAT}")
    return rec


def encode(rec: MatrixRecord) -> bytes:
    return encode_json(rec)


def read(path: Path) -> MatrixRecord:
    return decode(read_bytes(path), str(path))


def write(path: Path, rec: MatrixRecord) -> None:
    write_atomic(path, encode(rec))


def schema() -> dict[str, Any]:
    return schema_of(MatrixRecord, "fencecheck matrix.json",
                     "A matrix's rows, each with its expectation, whether it was met, and each "
                     "seed's run.")
