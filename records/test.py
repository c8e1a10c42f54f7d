"""test.json: what a run was (its id, name, start, configuration, versions) and, once it ended,
how long it took and its exit code.

The controller writes it twice: at the start (no `duration_s`, `exit_code`, `ready_s`,
`interrupted`: absent, not null) and at the end. Every release so far wrote the same top-level
fields (`ready_s` and `interrupted` came later), so a file without `format_version` is format 1
and the writer leaves it out while it is 1: the file is the one earlier releases wrote. Every
field may be absent (readers fall back to the run folder's name; replay needs only `config`),
none may have the wrong type.

`config` is the run's configuration as `RunConfig` (fencecheck.run.config) dumps it, with `client`,
`nodes` and `nemesis` as the run resolved them; `RunConfig` owns its fields and validates them
again at replay. Since each part's options moved to their owners (`backend_options`,
`runtime_options`, `workload_options`, `fault_options`, ...), a config holds them whole; the flat
fields earlier releases wrote (`persistence`, `ssh_user`, `think_ms`, `pause_target`, ...) are
still read, as aliases (fencecheck/run/options.py), so their files still replay. Its schema is
`fencecheck schema config`. The fields that readers interpret (backend, client, fault,
fencing ...) are `RunSettings`, checked on decode, so a wrong type there is an error naming the
field.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec
from msgspec import UNSET, UnsetType

from fencecheck.records.base import RecordFile, convert, decode_object, encode_json, schema_of

TEST_FORMAT = 1


class RunSettings(msgspec.Struct, kw_only=True):
    """The fields of `config` that the reports, the comparison and the process names read;
    absent ones are UNSET (hand-made run folders and plain `check` runs have few)."""

    backend: str | UnsetType = UNSET
    client: str | UnsetType = UNSET
    resource: str | UnsetType = UNSET
    workload: str | UnsetType = UNSET
    nemesis: list[str] | UnsetType = UNSET
    fencing: bool | UnsetType = UNSET
    concurrency: int | UnsetType = UNSET
    time_limit_s: float | UnsetType = UNSET
    lease_ms: int | UnsetType = UNSET
    runtime: str | UnsetType = UNSET
    client_options: dict[str, Any] | UnsetType = UNSET


class TestRecord(msgspec.Struct, kw_only=True):
    """One run's test.json (see the module docstring)."""

    __test__: ClassVar[bool] = False  # not a pytest test class

    format_version: int | UnsetType = UNSET  # absent: format 1
    run_id: str | UnsetType = UNSET
    name: str | UnsetType = UNSET
    started: str | UnsetType = UNSET
    config: dict[str, Any] = {}
    seed: int | UnsetType | None = UNSET
    versions: dict[str, str | None] | UnsetType = UNSET
    duration_s: float | UnsetType = UNSET
    exit_code: int | UnsetType = UNSET
    ready_s: float | UnsetType | None = UNSET
    interrupted: str | UnsetType | None = UNSET

    @property
    def settings(self) -> RunSettings:
        return msgspec.convert(self.config, RunSettings, strict=True)

    @property
    def run_seed(self) -> Any:
        """The seed as the configuration has it (the top-level copy where it has none; UNSET
        where neither is)."""
        return self.config.get("seed", self.seed)


def decode(data: bytes | str, where: str = "test.json") -> TestRecord:
    """A test.json document; RecordError (naming `where` and the field) if it is not one."""
    rec = decode_object(data, TestRecord, where, TEST_FORMAT)
    convert(rec.config, RunSettings, where, "config")
    return rec


def encode(rec: TestRecord) -> bytes:
    return encode_json(rec)


read, write = (_file := RecordFile(decode, encode)).read, _file.write


def schema() -> dict[str, Any]:
    return schema_of(TestRecord, "fencecheck test.json",
                     "What one run was: id, name, start, configuration (RunConfig's fields), "
                     "versions, and once it ended its duration and exit code.")
