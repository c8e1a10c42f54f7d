"""Runs one test end to end: nodes, lock service, resource, workers, nemesis schedule, heal,
final read, teardown, merged history, checks, results, report.

Cleanup goes through one ExitStack: every undo is registered before its do, undo is
idempotent, and SIGINT/SIGTERM unwind the stack (a second signal is noted and ignored so that
cleanup finishes). Whatever happens, the events recorded so far are merged into history.jsonl.
"""

from __future__ import annotations

import logging
import random
import secrets
import signal
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fencecheck import backends
from fencecheck.checker.base import Results
from fencecheck.clusters.base import Cluster, LockService, Remote
from fencecheck.clusters.base import Pausable as PausableService
from fencecheck.clusters.nemesis import PauseNemesis, PauseTarget, process_target
from fencecheck.config import ConfigError, RunConfig
from fencecheck.delays import setup_delays
from fencecheck.merge import merge_logs
from fencecheck.progress import Progress, ProgressFn
from fencecheck.schedule import EventLog, run_schedule
from fencecheck.signals import Interrupted, signals_raise
from fencecheck.store import new_run_dir, versions, write_json
from fencecheck.workers import Worker, final_read, spawn, stop_workers, worker_config

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RunOutcome:
    run_dir: Path
    results: Results | None
    exit_code: int
    interrupted: str | None = None
    ready_s: float | None = None
    first_violation_s: float | None = None


def _wait_port(remote: Remote, host: str, port: int, timeout_s: float) -> None:
    probe = "import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 0.5)"
    deadline = time.monotonic() + timeout_s
    while True:
        res = remote.run([sys.executable, "-c", probe, host, str(port)], check=False)
        if res.returncode == 0:
            return
        if time.monotonic() > deadline:
            from fencecheck.clusters.base import RemoteError

            raise RemoteError(res, f"nothing listens on {host}:{port} after {timeout_s} s")
        time.sleep(0.05)


def run(cfg: RunConfig, progress: ProgressFn | None = None) -> RunOutcome:
    backends.check_compatible(cfg)
    run_dir = new_run_dir(cfg.store, cfg.test_name)
    run_id = secrets.token_hex(3)
    handler = logging.FileHandler(run_dir / "fencecheck.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    if root.level > logging.DEBUG or root.level == logging.NOTSET:
        root.setLevel(logging.DEBUG)
    try:
        return _run(cfg, run_dir, run_id, progress or (lambda p: None))
    finally:
        root.removeHandler(handler)
        handler.close()


def _run(cfg: RunConfig, run_dir: Path, run_id: str, progress: ProgressFn) -> RunOutcome:
    t0_ns = time.monotonic_ns()
    started = time.time()
    test: dict[str, Any] = {
        "run_id": run_id,
        "name": cfg.test_name,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "config": {**cfg.model_dump(mode="json"), "client": cfg.client_name,
                   "nodes": cfg.node_count, "nemesis": list(cfg.faults) or ["none"]},
        "seed": cfg.seed,
        "versions": versions(cfg.backend),
    }
    write_json(run_dir / "test.json", test)
    log.info("run %s in %s", run_id, run_dir)
    workers: list[Worker] = []
    nemesis_log = EventLog(run_dir / "nemesis.jsonl", t0_ns)
    interrupted: Interrupted | None = None
    ready_s: float | None = None
    try:
        with signals_raise():
            try:
                ready_s = _drive(cfg, run_dir, run_id, t0_ns, workers, nemesis_log, progress)
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
    from fencecheck.checker.analyze import analyze
    from fencecheck.checker.history import load_ops

    results = analyze(load_ops(run_dir / "history.jsonl"), max_drift=cfg.max_drift)
    write_json(run_dir / "results.json", results.to_json())
    code = results.exit_code
    if interrupted is not None:
        code = 128 + interrupted.signum
    first = results.stats.get("first_violation_ns")
    test.update(duration_s=round(time.time() - started, 3), exit_code=code,
                ready_s=ready_s, interrupted=str(interrupted) if interrupted else None)
    write_json(run_dir / "test.json", test)
    _write_report(run_dir, progress)
    return RunOutcome(run_dir, results, code, str(interrupted) if interrupted else None,
                      ready_s, first / 1e9 if isinstance(first, int) else None)


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


def _drive(cfg: RunConfig, run_dir: Path, run_id: str, t0_ns: int, workers: list[Worker],
           nemesis_log: EventLog, progress: ProgressFn) -> float:
    """Everything between setup and teardown; returns the cluster-ready time in seconds."""
    servers = backends.server_nodes(cfg)
    clients = backends.client_nodes(cfg)
    rng = random.Random(cfg.seed)
    setup_start = time.monotonic()
    with ExitStack() as stack:
        progress(Progress("setting up nodes"))
        runtime = backends.make_runtime(cfg, run_id, run_dir)
        stack.callback(runtime.teardown)
        cluster: Cluster = runtime.setup([*servers, backends.RESOURCE_NODE], clients)
        nodes = {n: cluster.servers[n] for n in servers}

        progress(Progress(f"starting {cfg.backend}"))
        env_for = None
        clock: Any = None
        if "clock" in cfg.faults:
            from fencecheck.clusters.clock import ClockControl

            clock = ClockControl(run_dir / "clock")
            stack.callback(clock.reset_all)
            clock.setup()
            env_for = clock.env_for
        service = backends.make_service(cfg, env_for, runtime.ledger)
        stack.callback(service.teardown)
        service.setup(nodes, run_dir)

        progress(Progress(f"starting resource {cfg.resource}"))
        ropts = _start_resource(cfg, cluster, service, run_dir, stack)
        copts = backends.client_options(cfg, service)
        ropts, copts, delays = setup_delays(cfg, cluster, run_dir, runtime.ledger, ropts, copts,
                                            stack)
        ready_s = time.monotonic() - setup_start
        log.info("cluster ready in %.2f s", ready_s)

        for i, c in enumerate(clients):
            (run_dir / "nodes" / c).mkdir(parents=True, exist_ok=True)
            w = Worker(c, cluster.clients[c], run_dir / "nodes" / c / "worker.json",
                        run_dir / "nodes" / c / "events.jsonl")
            write_json(w.config, worker_config(cfg, i, w, copts, ropts, t0_ns))
            workers.append(w)
        grace = max(2.0, cfg.op_timeout_s * 2)
        stack.callback(stop_workers, workers, grace)
        for w in workers:
            w.proc = spawn(w, run_dir)

        nemeses = _make_nemeses(cfg, service, workers, servers, clock, cluster,
                                random.Random(cfg.seed + 1), runtime.ledger, run_id)
        nemeses.update(delays)
        for nem in nemeses.values():
            stack.callback(nem.heal)
        run_schedule(cfg, rng, workers, nemeses, nemesis_log, progress, servers)

        progress(Progress("healing"))
        for nem in nemeses.values():
            nem.heal()
        progress(Progress("stopping workers"))
        stop_workers(workers, grace)
        progress(Progress("final read"))
        final_read(cfg, workers[0], run_dir, copts, ropts, t0_ns)
        progress(Progress("tearing down"))
    return ready_s


def _start_resource(cfg: RunConfig, cluster: Cluster, service: LockService, run_dir: Path,
                    stack: ExitStack) -> dict[str, Any]:
    node = cluster.servers[backends.RESOURCE_NODE]
    if cfg.resource == "store":
        logdir = run_dir / "nodes" / node.name
        logdir.mkdir(parents=True, exist_ok=True)
        argv = backends.store_argv(node, cfg.fencing, logdir / "store-requests.log")
        daemon = node.start_daemon("store", argv, log=logdir / "store.log")
        stack.callback(node.signal, daemon.pid, signal.SIGKILL)
        _wait_port(node, node.address, backends.STORE_PORT, 10.0)
        return {"address": f"{node.address}:{backends.STORE_PORT}",
                "op_timeout_s": cfg.op_timeout_s, "fencing": cfg.fencing}
    if cfg.resource == "postgres":
        pg = backends.make_resource_service(cfg)
        assert pg is not None
        stack.callback(pg.teardown)
        pg.setup({node.name: node}, run_dir)
        return {"endpoints": pg.endpoints(), "op_timeout_s": cfg.op_timeout_s,
                "fencing": cfg.fencing}
    # etcd: the lock service itself holds the data
    return {"endpoints": service.endpoints(), "op_timeout_s": cfg.op_timeout_s,
            "fencing": cfg.fencing}


def _make_nemeses(cfg: RunConfig, service: LockService, workers: list[Worker],
                  servers: list[str], clock: Any, cluster: Cluster, rng: random.Random,
                  ledger: Any, run_id: str) -> dict[str, Any]:
    nemeses: dict[str, Any] = {}
    for fault in cfg.faults:
        if fault == "pause":
            targets: dict[str, PauseTarget] = {}
            for w in workers:
                assert w.proc is not None
                targets[w.name] = process_target(w.name, w.proc.pid)
            if isinstance(service, PausableService):
                for n in servers:
                    targets[n] = _server_target(service, n)
            nemeses["pause"] = PauseNemesis(targets)
        elif fault == "kill":
            from fencecheck.clusters.base import Killable
            from fencecheck.clusters.nemesis import KillNemesis

            if not isinstance(service, Killable):
                raise ConfigError(f"nemesis: kill: {cfg.backend} cannot be killed")
            nemeses["kill"] = KillNemesis(service)
        elif fault == "partition":
            from fencecheck.clusters.partition import PartitionNemesis

            nemeses["partition"] = PartitionNemesis(cluster, servers, backends.RESOURCE_NODE,
                                                    run_id=run_id, ledger=ledger, rng=rng)
        elif fault == "clock":
            from fencecheck.clusters.clock import ClockNemesis

            nemeses["clock"] = ClockNemesis(clock, servers, lease_ms=cfg.lease_ms, rng=rng)
        elif fault == "failover":
            from fencecheck.clusters.sentinel import FailoverNemesis, SentinelService

            if not isinstance(service, SentinelService):
                raise ConfigError("nemesis: failover needs --backend redis-sentinel")
            nemeses["failover"] = FailoverNemesis(service)
    return nemeses


def _server_target(service: PausableService, node: str) -> PauseTarget:
    return PauseTarget(node, lambda: service.pause(node), lambda: service.resume(node))


