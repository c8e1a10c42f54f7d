"""End to end through `fencecheck run` (netns, real servers, real worker processes) for the
`leader` and `cron` workloads: one short run each, fixed seeds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fencecheck.checker.history import load_ops
from fencecheck.checker.jobs import check_jobs
from fencecheck.run import wiring
from tests.conftest import (
    fc_namespaces,
    processes_matching,
    run_fencecheck,
    stopped_processes,
)

pytestmark = pytest.mark.netns


def run(store: Path, *args: str, timeout: float = 150) -> tuple[int, dict[str, Any], Path]:
    r = run_fencecheck("run", "--store", str(store), *args, timeout=timeout)
    assert r.returncode in (0, 1, 2), r.stdout + r.stderr
    runs = [p.resolve() for p in store.glob("*/latest")]
    assert len(runs) == 1
    # this run's own leftovers only: other runs may share the machine
    run_id = json.loads((runs[0] / "test.json").read_text())["run_id"]
    assert not fc_namespaces(run_id)
    assert not stopped_processes(str(store)) and not processes_matching(str(store))
    return r.returncode, json.loads((runs[0] / "results.json").read_text()), runs[0]


def election_client() -> str:
    """The registered name once fencecheck/run/wiring.py lists it for etcd, else module:Class."""
    if "etcd-election" in wiring.CLIENTS["etcd"]:
        return "etcd-election"
    return "fencecheck.workloads.clients.leader:EtcdElectionClient"


def test_fenced_etcd_election_with_pauses_is_valid(tmp_path: Path) -> None:
    code, results, run_dir = run(
        tmp_path, "--name", "leader-e2e", "--workload", "leader", "--backend", "etcd",
        "--client", election_client(), "--fencing", "on", "--nemesis", "pause",
        "--time-limit", "12", "--lease-ms", "1000", "--seed", "4",
    )
    assert code == 0, results
    assert results["valid"] is True
    ops = load_ops(run_dir / "history.jsonl")
    assert any(o.f == "start-pause" and o.ok for o in ops), "the nemesis paused no one"
    terms = [o.get("token") for o in ops if o.f == "acquire" and o.ok]
    assert terms and all(isinstance(t, int) for t in terms)
    assert {o.get("lock") for o in ops if o.f in ("acquire", "renew", "release")} == {"leader"}
    writes = [o for o in ops if o.f == "write" and o.ok]
    assert writes and all(o.get("key") == "leader" and o.get("token") in terms for o in writes)
    assert any(o.f == "renew" and o.ok for o in ops), "a tenure renews its lease"
    assert "skipped" not in results["checks"]["counter"]  # the final read of "leader" judged


def test_cron_on_redis_reports_the_duplicate_rate(tmp_path: Path) -> None:
    _, results, run_dir = run(
        tmp_path, "--name", "cron-e2e", "--workload", "cron", "--backend", "redis",
        "--nemesis", "pause", "--time-limit", "12", "--lease-ms", "1000", "--seed", "4",
    )
    ops = load_ops(run_dir / "history.jsonl")
    jobs = check_jobs(ops)
    assert jobs.skipped is None and jobs.valid is True  # duplicates are not violations here
    d = jobs.details
    assert d["mode"] == "efficiency" and d["jobs_executed"] >= 10
    assert 0.0 <= d["duplicate_rate"] <= 1.0
    assert d["duplicate_rate"] == round(d["jobs_executed_more_than_once"] / d["jobs_executed"], 4)
    if "jobs" in results["checks"]:  # once checker/analyze.py runs it
        assert results["checks"]["jobs"]["duplicate_rate"] == d["duplicate_rate"]
    assert {o.get("lock") for o in ops if o.f == "acquire"} == {"cron"}
