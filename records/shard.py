"""shard.json: what one shard of a matrix (`fencecheck matrix FILE --shard I/N`) was given and
ran, for `fencecheck merge` to put the N shards together.

Its version is the `format` field (1 since the first sharded release, always written). Each run
names its folders relative to the manifest, so that a CI artifact downloaded elsewhere still
resolves; `log` came later than the other fields and may be absent.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec
from msgspec import UNSET, UnsetType

from fencecheck.records.base import (
    RecordError,
    RecordFile,
    convert,
    decode_json,
    encode_json,
    schema_of,
)

SHARD_FORMAT: Final = 1


class ShardRun(msgspec.Struct, kw_only=True):
    """One row x seed the shard ran: as matrix.json's run, with the row's label."""

    row: str
    seed: int
    exit_code: int
    verdict: str
    run_dir: str | None = None
    report: str | None = None
    log: str | UnsetType | None = UNSET
    duration_s: float
    error: str | None = None


class ShardManifest(msgspec.Struct, kw_only=True):
    format: int = SHARD_FORMAT
    matrix: str  # the matrix file's name
    matrix_sha256: str  # its hash: a merge refuses shards of another file
    shard: int  # I of I/N
    of: int  # N
    assigned: list[tuple[str, int]]  # every (row label, seed) the plan gave this shard
    interrupted: int | None = None  # the signal that stopped the shard
    runs: list[ShardRun]


def decode(data: bytes | str, where: str = "shard.json") -> ShardManifest:
    doc = decode_json(data, where)
    if not isinstance(doc, dict):
        raise RecordError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    if doc.get("format") != SHARD_FORMAT:
        raise RecordError(f"{where}: not a shard manifest of format {SHARD_FORMAT}")
    return convert(doc, ShardManifest, where)


def encode(rec: ShardManifest) -> bytes:
    return encode_json(rec)


read, write = (_file := RecordFile(decode, encode)).read, _file.write


def schema() -> dict[str, Any]:
    return schema_of(ShardManifest, "fencecheck shard.json",
                     "One shard of a matrix: the matrix file's hash, I/N, the runs it was "
                     "given and the records of those it ran.")
