"""fencecheck.fleet.shard: `matrix --shard I/N` plans cover every row × seed exactly once and
balance
the shards; `merge` refuses a missing, repeated or foreign shard (exit 3, one line); and end to
end, a 3-shard run done in sequence here, merged, gives the verdicts, comparison and JUnit of the
unsharded run."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fencecheck.fleet.matrix import (
    Matrix,
    MatrixError,
    MatrixOutcome,
    Row,
    RowResult,
    RunRecord,
    load_matrix,
)
from fencecheck.fleet.shard import (
    Shard,
    expected_s,
    merge_results,
    parse_shard,
    plan,
    select,
    write_manifest,
)
from fencecheck.run.config import RunConfig
from tests.conftest import at_once, run_fencecheck

BACKENDS = ("redis", "redlock", "etcd", "zookeeper", "redis-sentinel")


def _rows(specs: list[tuple[str, int, int]]) -> tuple[Row, ...]:
    rows = []
    for i, (backend, limit, nseeds) in enumerate(specs, start=1):
        seeds = tuple(range(nseeds))
        configs = tuple(RunConfig(backend=backend, time_limit_s=limit, seed=s) for s in seeds)
        rows.append(Row(i, f"r{i}", "must-pass", seeds, configs, 60.0))
    return tuple(rows)


row_specs = st.lists(st.tuples(st.sampled_from(BACKENDS), st.integers(1, 120),
                               st.integers(1, 4)), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(row_specs, st.integers(1, 9))
def test_shards_cover_every_row_and_seed_exactly_once(specs: list[tuple[str, int, int]],
                                                      count: int) -> None:
    rows = _rows(specs)
    matrix = Matrix(Path("m.toml"), rows)
    every = Counter((r.label, s) for r in rows for s in r.seeds)
    got: Counter[tuple[str, int]] = Counter()
    loads = []
    for i in range(count):
        part = select(matrix, Shard(i, count))
        got.update((r.label, s) for r in part.rows for s in r.seeds)
        for r in part.rows:  # a row keeps its configs in step with its seeds
            assert [c.seed for c in r.configs] == list(r.seeds)
        loads.append(sum(expected_s(r) * len(r.seeds) for r in part.rows))
    assert got == every
    # LPT: no shard is more than one run longer than the least loaded one
    longest = max(expected_s(r) for r in rows)
    assert max(loads) - min(loads) <= longest + 1e-9
    assert plan(rows, count) == plan(rows, count)  # every machine computes the same plan


@pytest.mark.parametrize("text", ["3/3", "1", "a/b", "-1/3", "0/0", "1/2/3"])
def test_a_bad_shard_is_one_line(text: str) -> None:
    with pytest.raises(MatrixError, match="--shard"):
        parse_shard(text)


def test_parse_shard() -> None:
    assert parse_shard("2/3") == Shard(2, 3) and str(Shard(0, 1)) == "0/1"


def _shard_outputs(tmp_path: Path, matrix: Matrix, count: int) -> list[Path]:
    outs = []
    for i in range(count):
        part = select(matrix, Shard(i, count))
        out = tmp_path / f"shard{i}"
        out.mkdir()
        results = tuple(RowResult(r, tuple(RunRecord(s, 0, "valid", None, None, 1.0)
                                           for s in r.seeds)) for r in part.rows)
        write_manifest(MatrixOutcome(results, out, None, None, None, None), part, Shard(i, count))
        outs.append(out)
    return outs


def test_merge_refuses_missing_repeated_and_foreign_shards(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text("# a matrix\n")
    matrix = Matrix(path, _rows([("redis", 5, 2), ("etcd", 10, 1), ("redis", 3, 3)]))
    outs = _shard_outputs(tmp_path, matrix, 3)
    merged = merge_results(matrix, outs)
    assert [len(rr.runs) for rr in merged] == [2, 1, 3] and all(rr.met for rr in merged)
    with pytest.raises(MatrixError, match=r"^shard 1/3 missing"):
        merge_results(matrix, [outs[0], outs[2]])
    with pytest.raises(MatrixError, match="given twice"):
        merge_results(matrix, [*outs, outs[1] / "shard.json"])
    path.write_text("# another matrix\n")
    with pytest.raises(MatrixError, match="another matrix file"):
        merge_results(matrix, outs)


# ---- end to end: 3 shards in sequence, merged, against the unsharded run ---------------------

TINY = """
[defaults]
backend = "redis"
lease_ms = 1000

[[row]]
name = "unfenced-pause"
nemesis = "pause"
fencing = "off"
time_limit_s = 10
seeds = [1]
expect = "must-find"

[[row]]
name = "fenced-pause"
nemesis = "pause"
fencing = "on"
time_limit_s = 10
seeds = [1]
expect = "must-pass"

[[row]]
name = "quiet"
nemesis = "none"
time_limit_s = 5
seeds = [0, 1]
expect = "must-pass"

[[row]]
name = "quiet-but-expected-to-fail"
nemesis = "none"
time_limit_s = 3
expect = "must-find"
"""


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return run_fencecheck(*args, timeout=300, env=env)


def _rows_of(out: Path) -> list[tuple[str, str, bool, list[tuple[int, str]]]]:
    data = json.loads((out / "matrix.json").read_text())
    return [(r["row"], r["expect"], r["met"], [(x["seed"], x["verdict"]) for x in r["runs"]])
            for r in data["rows"]]


def _compare_of(out: Path) -> list[dict[str, str]]:
    keep = ("backend", "client", "resource", "workload", "nemesis", "fencing", "runs",
            "verdict", "invalid_runs", "expect")
    with open(out / "compare.csv", newline="") as fh:
        return sorted(({k: r[k] for k in keep} for r in csv.DictReader(fh)),
                      key=lambda r: sorted(r.items()))


def _junit_of(path: Path) -> list[tuple[str | None, str | None, bool]]:
    return sorted((c.get("classname"), c.get("name"), c.find("failure") is not None)
                  for c in ET.parse(path).getroot().iter("testcase"))


@pytest.mark.netns
@pytest.mark.timeout(600)  # 10 short runs in sequence: about 150 s here at load 12
@pytest.mark.usefixtures("no_leftovers")
def test_three_shards_merged_equal_the_unsharded_run(tmp_path: Path) -> None:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    stores = [tmp_path / f"runner{i}" / "store" for i in range(3)]

    def shards_in_sequence() -> None:
        for i, store in enumerate(stores):  # three "runners", each with its own store
            r = _cli("matrix", str(path), "--store", str(store), "--out",
                     str(store / "_matrix" / "n"), "--shard", f"{i}/3")
            assert r.returncode in (0, 1), r.stdout + r.stderr
            assert f"(shard {i}/3)" in r.stdout

    # The unsharded run goes on beside the shards (as on another runner): half the wall time.
    whole, _ = at_once(
        lambda: _cli("matrix", str(path), "--store", str(tmp_path / "whole"), "--out",
                     str(tmp_path / "whole-out"), "--junit", str(tmp_path / "whole.xml")),
        shards_in_sequence)
    assert whole.returncode == 1, whole.stdout + whole.stderr  # quiet-but-expected-to-fail
    merged = _cli("merge", str(path), *map(str, stores), "--out", str(tmp_path / "merged"),
                  "--junit", str(tmp_path / "merged.xml"))
    assert merged.returncode == whole.returncode, merged.stdout + merged.stderr
    assert _rows_of(tmp_path / "merged") == _rows_of(tmp_path / "whole-out")
    assert _compare_of(tmp_path / "merged") == _compare_of(tmp_path / "whole-out")
    assert _junit_of(tmp_path / "merged.xml") == _junit_of(tmp_path / "whole.xml")
    html = (tmp_path / "merged" / "compare.html").read_text()
    assert "quiet-but-expected-to-fail" in html and html.count("MISSED") >= 1

    missing = _cli("merge", str(path), str(stores[0]), str(stores[2]), "--out",
                   str(tmp_path / "m2"))
    assert missing.returncode == 3
    assert "shard 1/3 missing" in missing.stderr and "Traceback" not in missing.stderr


def test_merge_reads_a_matrix_whose_clients_this_machine_cannot_run(tmp_path: Path) -> None:
    # The merge job installs fencecheck only: no node, no JVM, no built client programs.
    path = tmp_path / "m.toml"
    path.write_text('[[row]]\nname = "own"\nbackend = "redis"\nclient_cmd = "/no/such/prog"\n'
                    'expect = "must-pass"\n')
    with pytest.raises(MatrixError, match="not found"):
        load_matrix(path, tmp_path / "store")
    matrix = load_matrix(path, tmp_path / "store", runnable=False)
    outs = _shard_outputs(tmp_path, matrix, 2)
    r = _cli("merge", str(path), *map(str, outs), "--out", str(tmp_path / "merged"))
    assert r.returncode != 3, r.stderr  # the rows were read; the runs had no folders
    assert [rr.row.label for rr in merge_results(matrix, outs)] == ["own"]
