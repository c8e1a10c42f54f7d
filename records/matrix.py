"""matrix.json: what a `fencecheck matrix` (or `merge` of its shards) ran: each row's
expectation and whether it was met, each seed's run with its verdict, folder and report.

Written since the first matrix release with the same fields and no version, so a file without
`format_version` is format 1, and the writer leaves it out while it is 1. A row's label,
expectation and runs, and each run's seed and verdict, are required; the rest may be absent.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from fencecheck.records.base import RecordFile, decode_object, encode_json, schema_of

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
    return decode_object(data, MatrixRecord, where, MATRIX_FORMAT)


def encode(rec: MatrixRecord) -> bytes:
    return encode_json(rec)


read, write = (_file := RecordFile(decode, encode)).read, _file.write


def schema() -> dict[str, Any]:
    return schema_of(MatrixRecord, "fencecheck matrix.json",
                     "A matrix's rows, each with its expectation, whether it was met, and each "
                     "seed's run.")
