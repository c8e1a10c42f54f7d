"""shard.json through its record (fencecheck.records.shard): what `matrix --shard` writes reads
back to every field, a manifest of an earlier release (no `log`) still loads, and a wrong one is
one line naming the file and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from msgspec import UNSET

from fencecheck.records import shard
from fencecheck.records.base import RecordError

# As the first sharded release wrote it (json.dumps(indent=2)), before runs had a `log`.
EARLIER = {
    "format": 1, "matrix": "m.toml", "matrix_sha256": "ab" * 32, "shard": 0, "of": 2,
    "assigned": [["a", 1], ["b", 2]], "interrupted": None,
    "runs": [{"row": "a", "seed": 1, "exit_code": 1, "verdict": "invalid",
              "run_dir": "../store/a/x", "report": "../store/a/x/report.html",
              "duration_s": 12.5, "error": None}],
}


def test_a_manifest_reads_back_to_every_field(tmp_path: Path) -> None:
    rec = shard.decode(json.dumps(EARLIER, indent=2))
    assert rec.runs[0].log is UNSET and rec.assigned == [("a", 1), ("b", 2)]
    assert json.loads(shard.encode(rec)) == EARLIER
    rec.runs[0].log = "logs/a.log"
    shard.write(tmp_path / "shard.json", rec)
    assert shard.read(tmp_path / "shard.json") == rec


@pytest.mark.parametrize(("doc", "named"), [
    ({**EARLIER, "format": 2}, "x/shard.json: not a shard manifest of format 1"),
    ({**EARLIER, "of": "2"}, "x/shard.json: of: expected `int`, got `str`"),
    ({k: v for k, v in EARLIER.items() if k != "runs"},
     "x/shard.json: object missing required field `runs`"),
])
def test_a_bad_manifest_is_named(doc: dict[str, object], named: str) -> None:
    with pytest.raises(RecordError) as e:
        shard.decode(json.dumps(doc), "x/shard.json")
    assert str(e.value).startswith(named), str(e.value)


def test_the_schema_is_generated_from_the_record() -> None:
    props = shard.schema()["$defs"]["ShardManifest"]["properties"]
    assert {"matrix_sha256", "shard", "of", "runs"} <= set(props)


@pytest.mark.parametrize("name", ["schedule", "shard"])
def test_schema_prints_the_records_schema(name: str) -> None:
    from typer.testing import CliRunner

    from fencecheck.checker.schemas import schema
    from fencecheck.cli.app import app

    r = CliRunner().invoke(app, ["schema", name])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output) == json.loads(json.dumps(schema(name)))
    assert json.loads(r.output)["title"] == f"fencecheck {name}.json"
