"""worker.json through its record (WorkerConfig): what the controller writes reads back whole,
with the workload's own options, and a worker.json of an earlier release (without `workload`,
`idempotent` or `options`) still loads, as the lock workload."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fencecheck.run.config import make_config
from fencecheck.run.workers import WorkerProcess, worker_config, write_worker_config
from fencecheck.workloads.loops.worker import WorkerConfig
from fencecheck.workloads.registry import workload_class


def test_the_controllers_worker_json_reads_back(tmp_path: Path) -> None:
    cfg = make_config(workload="cron", idempotent=True, think_ms=50, store=tmp_path)
    w = WorkerProcess("c1", None, tmp_path / "worker.json", tmp_path / "e.jsonl")  # type: ignore[arg-type]
    written = worker_config(cfg, 1, w, {"endpoints": ["a:1"]}, {"address": "b:2"}, 7)
    write_worker_config(written, w.config)
    assert WorkerConfig.load(w.config) == written
    assert json.loads(w.config.read_text())["options"]["idempotent"] is True
    assert workload_class(written.workload).__name__ == "CronWorker"


def test_an_earlier_worker_json_still_loads(tmp_path: Path) -> None:
    earlier = {"worker": 0, "concurrency": 2, "process_base": 0, "client": "redis-setnx",
               "client_options": {"endpoints": ["10.0.0.2:6379"]}, "resource": "store",
               "resource_options": {"address": "10.0.0.9:7000"}, "locks": ["lock-0"],
               "lease_ms": 2000, "acquire_timeout_s": 5.0, "think_ms": 20.0,
               "writes_per_section": 3, "idle_ms": 10.0, "renew": False, "log": "e.jsonl",
               "t0_ns": 1, "seed": 0, "op_timeout_s": 1.0}
    (tmp_path / "worker.json").write_text(json.dumps(earlier))
    config = WorkerConfig.load(tmp_path / "worker.json")
    assert config.workload == "lock" and config.options == {} and not config.idempotent
    assert workload_class(config.workload).__name__ == "Worker"


def test_the_worker_json_names_what_the_worker_runs_so_it_never_reads_the_descriptors(
        tmp_path: Path) -> None:
    """The controller resolves the client, resource and loop by their descriptors; the worker
    process imports those three and not the catalog (a third of a worker's start was imports)."""
    cfg = make_config(store=tmp_path)  # the default: redis, redis-setnx, the store, lock
    w = WorkerProcess("c1", None, tmp_path / "worker.json", tmp_path / "e.jsonl")  # type: ignore[arg-type]
    written = worker_config(cfg, 0, w, {"endpoints": ["a:1"]}, {"address": "b:2"}, 7)
    assert (written.client_spec, written.resource_spec, written.worker_spec) == (
        "fencecheck.workloads.clients.redis:SetnxClient",
        "fencecheck.workloads.resources.store:StoreResource",
        "fencecheck.workloads.loops.worker:Worker")
    write_worker_config(written, w.config)
    probe = ("import sys\nfrom fencecheck.workloads.loops.worker import WorkerConfig\n"
             "from fencecheck.workloads.registry import make_client, make_resource\n"
             f"c = WorkerConfig.load({str(w.config)!r})\n"
             "make_client(c.client, c.client_options, c.client_spec)\n"
             "make_resource(c.resource, c.resource_options, c.resource_spec)\n"
             "print('fencecheck.descriptors.catalog' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
