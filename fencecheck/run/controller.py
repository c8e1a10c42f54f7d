"""Runs one test end to end: nodes, lock service, resource, workers, nemesis schedule, heal,
final read, teardown, merged history, checks, results, report. What to start and which faults
come from the plan (fencecheck/run/plan.py); the parts that start them are injected (`Parts`), so
the order of setup and teardown is unit-tested with in-memory fakes.

Cleanup goes through one ExitStack: every undo is registered before its do, undo is
idempotent, and SIGINT/SIGTERM unwind the stack (a second signal is noted and ignored so that
cleanup finishes). Whatever happens, the events recorded so far are merged into history.jsonl.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from fencecheck.checker.base import Results
from fencecheck.clusters.base import Cluster, LockService
from fencecheck.clusters.cleaner import claim_run_id, release_run_id
from fencecheck.nemesis.faults.base import (
    ClientRoutes,
    Fault,
    FaultContext,
    FaultOptions,
    ServiceDirs,
    ServiceEnv,
    ServiceUp,
)
from fencecheck.nemesis.schedule import NemesisLog, ScheduledFault, load_steps, run_schedule
from fencecheck.records import results as results_record
from fencecheck.records import test as test_record
from fencecheck.records.test import TestRecord
from fencecheck.run import wiring
from fencecheck.run.config import RunConfig, fault_settings
from fencecheck.run.history_merge import merge_logs
from fencecheck.run.plan import REAL_PARTS, Parts, RunPlan, make_plan
from fencecheck.run.progress import Progress, ProgressFn
from fencecheck.run.resources import ResourceStart
from fencecheck.run.signals import Interrupted, signals_raise
from fencecheck.run.store import new_run_dir, versions
from fencecheck.run.workers import (
    WorkerProcess,
    final_read,
    preload,
    spawn,
    stop_workers,
    worker_config,
    worker_env,
    write_worker_config,
)
from fencecheck.workloads.loops.worker import WorkerConfig

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RunOutcome:
    run_dir: Path
    results: Results | None
    exit_code: int
    interrupted: str | None = None
    ready_s: float | None = None
    first_violation_s: float | None = None


def run(cfg: RunConfig, progress: ProgressFn | None = None,
        parts: Parts = REAL_PARTS) -> RunOutcome:
    """Plan (refusing what cannot run before anything exists), then execute with parts."""
    plan = make_plan(cfg)
    run_dir = new_run_dir(cfg.store, cfg.test_name)
    run_id = claim_run_id()
    handler = logging.FileHandler(run_dir / "fencecheck.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    if root.level > logging.DEBUG or root.level == logging.NOTSET:
        root.setLevel(logging.DEBUG)
    try:
        return _run(plan, parts, run_dir, run_id, progress or (lambda p: None))
    finally:
        release_run_id(run_id)
        root.removeHandler(handler)
        handler.close()


def _run(plan: RunPlan, parts: Parts, run_dir: Path, run_id: str,
         progress: ProgressFn) -> RunOutcome:
    cfg = plan.cfg
    t0_ns = time.monotonic_ns()
    started = time.time()
    test = TestRecord(
        run_id=run_id,
        name=cfg.test_name,
        started=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        config={**cfg.model_dump(mode="json"), "client": cfg.client_name,
                "nodes": cfg.node_count, "nemesis": list(cfg.faults) or ["none"]},
        seed=cfg.seed,
        versions=versions(cfg.backend, cfg.client_name, cfg.client_options),
    )
    test_record.write(run_dir / "test.json", test)
    log.info("run %s in %s", run_id, run_dir)
    workers: list[WorkerProcess] = []
    nemesis_log = NemesisLog(run_dir / "nemesis.jsonl", t0_ns)
    interrupted: Interrupted | None = None
    ready_s: float | None = None
    try:
        with signals_raise():
            try:
                ready_s = _drive(plan, parts, run_dir, run_id, t0_ns, workers, nemesis_log,
                                 progress)
            except Interrupted as e:
                interrupted = e
                log.warning("interrupted by %s: healed and torn down", e)
    finally:
        nemesis_log.close()
        progress(Progress("merging"))
        logs = [w.events for w in workers] + [run_dir / "final-read.jsonl",
                                               run_dir / "nemesis.jsonl"]
        n = merge_logs(logs, run_dir / "history.jsonl")
        log.info("history: %d events", n)
    progress(Progress("checking"))
    from fencecheck.checker.verdict import check_history

    results = check_history(run_dir, max_drift=cfg.max_drift, time_limit_s=60.0)
    record = results.record()
    results_record.write(run_dir / "results.json", record)
    code = results.exit_code
    if interrupted is not None:
        code = 128 + interrupted.signum
    first = record.first_violation_ns
    test_record.write(run_dir / "test.json", msgspec.structs.replace(
        test, duration_s=round(time.time() - started, 3), exit_code=code, ready_s=ready_s,
        interrupted=str(interrupted) if interrupted else None))
    if parts.report:
        _write_report(run_dir, progress)
    return RunOutcome(run_dir, results, code, str(interrupted) if interrupted else None,
                      ready_s, first / 1e9 if first is not None else None)


def _write_report(run_dir: Path, progress: ProgressFn) -> None:
    progress(Progress("report"))
    try:
        from fencecheck.reports.html import write_report
    except ImportError:
        log.info("no HTML report in this build")
        return
    try:
        write_report(run_dir)
    except Exception:
        log.exception("the HTML report failed; results.json and history.jsonl are complete")


def _drive(plan: RunPlan, parts: Parts, run_dir: Path, run_id: str, t0_ns: int,
           workers: list[WorkerProcess], nemesis_log: NemesisLog, progress: ProgressFn) -> float:
    """Everything between setup and teardown; returns the cluster-ready time in seconds."""
    cfg = plan.cfg
    servers = list(plan.servers)
    clients = list(plan.clients)
    rng = random.Random(plan.schedule_seed)
    setup_start = time.monotonic()
    with ExitStack() as stack:
        progress(Progress("setting up nodes"))
        runtime = parts.runtime(cfg, run_id, run_dir)
        stack.callback(runtime.teardown)
        cluster: Cluster = runtime.setup(list(plan.nodes), clients)
        nodes = {n: cluster.servers[n] for n in servers}

        progress(Progress(f"starting {cfg.backend}"))
        faults = _build_faults(plan, parts, run_id, run_dir)
        env_for = None
        for fault in faults.values():
            if isinstance(fault, ServiceEnv):
                env_for = fault.prepare(stack)
        service = parts.service(cfg, env_for, runtime.ledger)
        for fault in faults.values():  # before the service's undo: its mounts outlive it
            if isinstance(fault, ServiceDirs):
                fault.place(service, servers, stack, runtime.ledger)
        stack.callback(service.teardown)
        service.setup(nodes, run_dir)

        progress(Progress(f"starting resource {cfg.resource}"))
        ropts = _start_resource(plan, parts, cluster, service, run_dir, stack)
        copts = wiring.client_options(cfg, service)
        for fault in faults.values():
            if isinstance(fault, ClientRoutes):
                ropts, copts = fault.route(cluster, stack, runtime.ledger, ropts, copts)
        for fault in faults.values():
            if isinstance(fault, ServiceUp):
                fault.service_up(service, servers)
        ready_s = time.monotonic() - setup_start
        log.info("cluster ready in %.2f s", ready_s)

        configs: list[WorkerConfig] = []
        for i, c in enumerate(clients):
            (run_dir / "nodes" / c).mkdir(parents=True, exist_ok=True)
            w = WorkerProcess(c, cluster.clients[c], run_dir / "nodes" / c / "worker.json",
                        run_dir / "nodes" / c / "events.jsonl")
            configs.append(worker_config(cfg, i, w, copts, ropts, t0_ns))
            write_worker_config(configs[-1], w.config)
            workers.append(w)
        if configs:
            preload(workers, configs[0])  # every worker runs the same modules
        grace = max(2.0, cfg.op_timeout_s * 2)
        env_for_worker = worker_env(plan.faults, faults, stack)
        stack.callback(stop_workers, workers, grace)
        for w in workers:
            w.proc = spawn(w, run_dir, env=env_for_worker(w.name))

        pids = {w.name: w.proc.pid for w in workers if w.proc is not None}
        ctx = FaultContext(cluster, servers, plan.resource_node, service, pids,
                           runtime.ledger)
        for fault in faults.values():
            stack.callback(fault.heal)
            fault.bind(ctx)
        replay = load_steps(cfg.replay, list(faults)) if cfg.replay is not None else None
        run_schedule(cfg, rng, workers, _scheduled(plan, faults), nemesis_log, progress,
                     servers, record=run_dir / "schedule.json", replay=replay)

        progress(Progress("healing"))
        for fault in faults.values():
            fault.heal()
        progress(Progress("stopping workers"))
        stop_workers(workers, grace)
        progress(Progress("final read"))
        final_read(cfg, workers[0], run_dir, copts, ropts, t0_ns)
        progress(Progress("tearing down"))
    return ready_s


def _start_resource(plan: RunPlan, parts: Parts, cluster: Cluster, service: LockService,
                    run_dir: Path, stack: ExitStack) -> dict[str, Any]:
    cfg = plan.cfg
    node = cluster.servers[plan.resource_node]
    starter = parts.resource(cfg)
    opts: dict[str, Any] = starter(ResourceStart(node, service, run_dir, stack, cfg.fencing,
                                                 cfg.op_timeout_s, cfg.settings("resource")))
    return opts


def _build_faults(plan: RunPlan, parts: Parts, run_id: str, run_dir: Path) -> dict[str, Fault]:
    """The run's faults, in --nemesis order, sharing one rng seeded from the plan, each with
    its own settings (a hold --fault-duration fixed for every fault)."""
    cfg = plan.cfg
    opts = FaultOptions(run_id, run_dir, cfg.backend, cfg.lease_ms, cfg.pause_target,
                        cfg.pause_duration_s, random.Random(plan.fault_seed))
    return {d.name: parts.fault(d, dataclasses.replace(opts, settings=fault_settings(cfg, d.name)))
            for d in plan.faults}


def _scheduled(plan: RunPlan, faults: dict[str, Fault]) -> dict[str, ScheduledFault]:
    descs = {d.name: d for d in plan.faults}
    return {name: ScheduledFault(f, descs[name].waits_for_grant, descs[name].ends_on_successor)
            for name, f in faults.items()}
