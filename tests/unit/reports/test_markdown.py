"""The comparison table (reports/markdown.py) from a matrix output directory: found counts only
invalid runs, kinds and first-violation times come from their results, a missed row says so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fencecheck.descriptors import catalog
from fencecheck.descriptors.catalog import backends
from fencecheck.fleet.matrix import load_matrix
from fencecheck.reports.markdown import lines, main, render
from tests.conftest import REPO


def _run(root: Path, name: str, verdict: str, client: str, fencing: bool,
         kinds: list[str], first_ns: int | None) -> dict[str, Any]:
    run_dir = root / name
    run_dir.mkdir(parents=True)
    config = {"client": client, "backend": "postgres-advisory", "nemesis": ["partition"],
              "fencing": fencing, "client_options": {"idle_session_timeout": True}}
    (run_dir / "test.json").write_text(json.dumps({"config": config}))
    checks = {"exclusion": {"violations": [{"kind": k} for k in kinds]}}
    (run_dir / "results.json").write_text(
        json.dumps({"checks": checks, "stats": {"first_violation_ns": first_ns}}))
    return {"seed": 1, "verdict": verdict, "run_dir": str(run_dir)}


def _matrix(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    rows = [
        {"row": "partition-pg-advisory", "expect": "must-find", "met": False, "runs": [
            _run(tmp_path, "a1", "invalid", "pg-advisory", False, ["lost-update"], 4_000_000_000),
            _run(tmp_path, "a2", "valid", "pg-advisory", False, [], None)]},
        {"row": "partition-pg-advisory-counter-fenced", "expect": "must-pass", "met": True,
         "runs": [_run(tmp_path, "b1", "valid", "pg-advisory-counter", True, [], None)]},
    ]
    (out / "matrix.json").write_text(json.dumps({"rows": rows}))
    return out


def test_lines_count_found_seeds_and_kinds(tmp_path: Path) -> None:
    a, b = lines(_matrix(tmp_path))
    assert (a.found, a.seeds, a.kinds, a.first_s, a.met) == (1, 2, ("lost-update",), 4.0, False)
    assert (b.found, b.seeds, b.fenced, b.met) == (0, 1, True, True)
    assert a.options == "idle_session_timeout=true"


def test_render_names_every_row_and_flags_the_missed_one(tmp_path: Path) -> None:
    text = render(lines(_matrix(tmp_path)), "examples/libraries.toml")
    assert "1 of 2 rows met their expectation." in text
    assert "| postgres-advisory | partition | no | must-find | 1/2 | lost-update | 4.0 s | – " \
        "| **MISSED** |" in text
    assert text.count("\n| ") == 3  # the header and two rows


def test_a_directory_without_a_matrix_is_a_clear_error(tmp_path: Path, capsys: Any) -> None:
    assert main([str(tmp_path)]) == 3
    assert "matrix.json: not found" in capsys.readouterr().err


def test_the_libraries_example_covers_every_backend_and_lock_library(tmp_path: Path) -> None:
    path = REPO / "examples" / "libraries.toml"
    # What the rows cover, not whether this machine has built their programs (consul is built
    # beside the tests on a fresh machine: scripts/test.sh's late builds).
    m = load_matrix(path, tmp_path / "store", runnable=False)
    configs = [r.configs[0] for r in m.rows]
    assert {c.backend for c in configs} == set(backends())
    clients = {c.client_name for c in configs}
    assert {"python-redis-lock", "aioredlock", "etcd3", "pg-advisory",
            "pg-advisory-counter"} <= clients
    described = {c.name for c in catalog.clients().values() if c.library}
    assert clients <= described  # each one's descriptor gives the table its words
    assert all(len(r.seeds) == 2 for r in m.rows)
    for lib in ("python-redis-lock", "aioredlock", "etcd3", "pg-advisory"):
        expects = {r.expect for r, c in zip(m.rows, configs, strict=True)
                   if c.client_name == lib}
        assert expects == {"must-find", "must-pass"}, lib


def test_a_row_run_again_later_replaces_the_earlier_run_in_its_place(
    tmp_path: Path, capsys: Any
) -> None:
    (tmp_path / "first").mkdir()
    first = _matrix(tmp_path / "first")
    again = tmp_path / "again" / "out"
    again.mkdir(parents=True)
    rerun = {"row": "partition-pg-advisory", "expect": "must-find", "met": True, "runs": [
        _run(tmp_path / "again", "c1", "invalid", "pg-advisory", False, ["lost-update"],
             3 * 10**9)]}
    (again / "matrix.json").write_text(json.dumps({"rows": [rerun]}))
    assert main([str(first), str(again)]) == 0
    text = capsys.readouterr().out
    assert "2 of 2 rows met their expectation." in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and "pg-advisory" in line]
    assert len(rows) == 2 and "| 1/1 | lost-update | 3.0 s | – | met |" in rows[0]


def test_a_client_is_described_once_by_its_descriptor_with_the_version_it_ran() -> None:
    from fencecheck.run.store import versions

    assert versions("redis", "redis-setnx")["client"].startswith(
        "SET NX PX + INCR token in one script [redis ")  # redis-py's installed version
    # a shipped program: the version its go.mod / pom.xml / package.json pins
    assert versions("redlock", "go-redsync")["client"] == \
        "go-redsync `Mutex` (Redlock in Go) [redsync v4.13.0]"
    assert versions("redis", "redisson")["client"] == \
        "Redisson `RLock` (watchdog) [redisson 3.40.2]"
    assert versions("redlock", "node-redlock")["client"] == \
        "npm `redlock` over ioredis [redlock 4.2.0]"
    assert versions("kubernetes", "client-go")["client"].endswith("[client-go v0.37.2]")
    assert "client" not in versions("redis", "no-such-client")


def test_the_notice_column_tells_not_recorded_from_none_from_a_lag(tmp_path: Path) -> None:
    # "–": the row did not record notices (off, the default); "none": it did, and none came;
    # otherwise the median lead or lag of the grants told
    out = tmp_path / "out"
    out.mkdir()
    runs = [_run(tmp_path, n, "invalid", "zookeeper", False, ["lost-update"], 10**9)
            for n in ("off", "quiet", "told")]
    for name, mode in (("quiet", "work"), ("told", "work")):
        test = json.loads((tmp_path / name / "test.json").read_text())
        test["config"]["client_options"] = {"notices": mode}
        (tmp_path / name / "test.json").write_text(json.dumps(test))
    told = json.loads((tmp_path / "told" / "results.json").read_text())
    told["checks"]["notices"] = {"violations": [], "notices": 1,
                                 "per_grant": [{"lead_ns": -250_000_000}]}
    (tmp_path / "told" / "results.json").write_text(json.dumps(told))
    rows = [{"row": f"r-{r['run_dir'][-5:]}", "expect": "must-find", "met": True, "runs": [r]}
            for r in runs]
    (out / "matrix.json").write_text(json.dumps({"rows": rows}))
    assert [line.notice for line in lines(out)] == ["–", "none", "lag 250 ms"]
