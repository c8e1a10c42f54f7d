"""Runs one test end to end: nodes, lock service, resource, workers, nemesis schedule, heal,
final read, teardown, merged history, checks, results, report.

Cleanup goes through one ExitStack: every undo is registered before its do, undo is
idempotent, and SIGINT/SIGTERM unwind the stack (a second signal is noted and ignored so that
cleanup finishes). Whatever happens, the events recorded so far are merged into history.jsonl.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

from checker.base import Results
from clusters.base import ClientNode, Cluster, LockService, NemesisOp, Remote
from clusters.base import Pausable as PausableService
from clusters.nemesis import PauseNemesis, PauseTarget, process_target
from fencecheck import backends
from fencecheck.config import ConfigError, RunConfig
from fencecheck.merge import merge_logs
from fencecheck.store import new_run_dir, versions, write_json
from fencecheck.tail import LogTailer

log = logging.getLogger(__name__)

FINAL_READ_PROCESS_BASE = 1_000_000


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass(slots=True)
class Progress:
    phase: str
    elapsed_s: float = 0.0
    limit_s: float = 0.0
    ops_per_s: float = 0.0
    ok: int = 0
    fail: int = 0
    info: int = 0
    faults: list[str] = field(default_factory=list)


ProgressFn = Callable[[Progress], None]


@dataclass(slots=True)
class RunOutcome:
    run_dir: Path
    results: Results | None
    exit_code: int
    interrupted: str | None = None
    ready_s: float | None = None
    first_violation_s: float | None = None


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGINT/SIGTERM raise Interrupted once; later ones are logged and ignored."""
    fired: list[int] = []

    def handler(signum: int, _frame: FrameType | None) -> None:
        if fired:
            log.warning("%s received again: still cleaning up", signal.Signals(signum).name)
            return
        fired.append(signum)
        raise Interrupted(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


class _EventLog:
    """The controller's own JSONL log of nemesis ops, in the workers' format."""

    def __init__(self, path: Path, t0_ns: int) -> None:
        self.t0_ns = t0_ns
        self.fh: IO[str] = open(path, "a")  # noqa: SIM115 (closed by close())

    def write(self, typ: str, f: str, value: Any, error: str | None = None) -> None:
        ev: dict[str, Any] = {
            "time": time.monotonic_ns() - self.t0_ns,
            "process": "nemesis",
            "type": typ,
            "f": f,
            "value": value,
        }
        if error is not None:
            ev["error"] = error
        self.fh.write(json.dumps(ev, separators=(",", ":"), default=str) + "\n")
        self.fh.flush()

    def close(self) -> None:
        self.fh.close()


@dataclass(slots=True)
class _Worker:
    name: str
    node: ClientNode
    config: Path
    events: Path
    proc: subprocess.Popen[bytes] | None = None


def _worker_config(cfg: RunConfig, i: int, w: _Worker, copts: dict[str, Any],
                   ropts: dict[str, Any], t0_ns: int) -> dict[str, Any]:
    return {
        "worker": i,
        "concurrency": cfg.concurrency,
        "process_base": 0,
        "client": cfg.client_name,
        "client_options": {**copts, "worker": i},  # which endpoint a client tries first
        "resource": cfg.resource,
        "resource_options": ropts,
        "locks": [f"lock-{j}" for j in range(cfg.locks)],
        "lease_ms": cfg.lease_ms,
        "acquire_timeout_s": cfg.acquire_timeout_s,
        "think_ms": cfg.think_ms,
        "writes_per_section": cfg.writes_per_section,
        "idle_ms": cfg.idle_ms,
        "renew": cfg.renew,
        "log": str(w.events),
        "t0_ns": t0_ns,
        "seed": cfg.seed * 1000 + i,
        "op_timeout_s": cfg.op_timeout_s,
        **({"workload": cfg.workload, "idempotent": cfg.idempotent}
           if cfg.workload != "lock" else {}),
    }


def _spawn(w: _Worker, run_dir: Path, extra: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
    with open(run_dir / "nodes" / w.name / "worker.log", "ab") as out:
        return w.node.spawn(
            [sys.executable, "-m", "workloads.worker", str(w.config), *extra],
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _stop_workers(workers: list[_Worker], grace_s: float) -> None:
    """Resume (a SIGSTOPped process ignores SIGTERM until resumed), ask, then kill."""
    procs = [w.proc for w in workers if w.proc is not None and w.proc.poll() is None]
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            p.send_signal(signal.SIGCONT)
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.info("worker %d did not stop in %.1f s: SIGKILL", p.pid, grace_s)
            p.kill()
            p.wait()


def _wait_port(remote: Remote, host: str, port: int, timeout_s: float) -> None:
    probe = "import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 0.5)"
    deadline = time.monotonic() + timeout_s
    while True:
        res = remote.run([sys.executable, "-c", probe, host, str(port)], check=False)
        if res.returncode == 0:
            return
        if time.monotonic() > deadline:
            from clusters.base import RemoteError

            raise RemoteError(res, f"nothing listens on {host}:{port} after {timeout_s} s")
        time.sleep(0.05)


class _Schedule:
    """The seeded fault schedule: wait, start one fault, hold it, stop it, repeat."""

    def __init__(self, cfg: RunConfig, rng: random.Random) -> None:
        self.cfg = cfg
        self.rng = rng
        self.faults = list(cfg.faults)

    def gap(self) -> float:
        lo, hi = self.cfg.nemesis_interval_s
        return self.rng.uniform(lo, hi)

    def hold(self, fault: str) -> float:
        if self.cfg.fault_duration_s is not None:
            lo, hi = self.cfg.fault_duration_s
        elif fault == "pause":
            lo, hi = self.cfg.pause_duration_s
        elif fault == "kill":
            # Restart inside the lease: a server that lost its keys (no persistence) is back
            # while the old grant is still surely held, so a second grant is a double grant.
            lease_s = self.cfg.lease_ms / 1000
            lo, hi = min(0.2, lease_s / 4), max(0.3, lease_s / 2)
        else:
            lo, hi = 3.0, 6.0
        return self.rng.uniform(lo, hi)

    def pick(self) -> str:
        return self.rng.choice(self.faults)


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
    workers: list[_Worker] = []
    nemesis_log = _EventLog(run_dir / "nemesis.jsonl", t0_ns)
    interrupted: Interrupted | None = None
    ready_s: float | None = None
    try:
        with _signals_raise():
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
    from checker.analyze import analyze
    from checker.history import load_ops

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
        from reports.html import write_report
    except ImportError:
        log.info("no HTML report in this build")
        return
    try:
        write_report(run_dir)
    except Exception:
        log.exception("the HTML report failed; results.json and history.jsonl are complete")


def _drive(cfg: RunConfig, run_dir: Path, run_id: str, t0_ns: int, workers: list[_Worker],
           nemesis_log: _EventLog, progress: ProgressFn) -> float:
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
            from clusters.clock import ClockControl

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
        ready_s = time.monotonic() - setup_start
        log.info("cluster ready in %.2f s", ready_s)

        for i, c in enumerate(clients):
            (run_dir / "nodes" / c).mkdir(parents=True, exist_ok=True)
            w = _Worker(c, cluster.clients[c], run_dir / "nodes" / c / "worker.json",
                        run_dir / "nodes" / c / "events.jsonl")
            write_json(w.config, _worker_config(cfg, i, w, copts, ropts, t0_ns))
            workers.append(w)
        grace = max(2.0, cfg.op_timeout_s * 2)
        stack.callback(_stop_workers, workers, grace)
        for w in workers:
            w.proc = _spawn(w, run_dir)

        nemeses = _make_nemeses(cfg, service, workers, servers, clock, cluster,
                                random.Random(cfg.seed + 1), runtime.ledger, run_id)
        for nem in nemeses.values():
            stack.callback(nem.heal)
        _loop(cfg, rng, workers, nemeses, nemesis_log, progress, servers)

        progress(Progress("healing"))
        for nem in nemeses.values():
            nem.heal()
        progress(Progress("stopping workers"))
        _stop_workers(workers, grace)
        progress(Progress("final read"))
        _final_read(cfg, workers[0], run_dir, copts, ropts, t0_ns)
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


def _make_nemeses(cfg: RunConfig, service: LockService, workers: list[_Worker],
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
            from clusters.base import Killable
            from clusters.nemesis import KillNemesis

            if not isinstance(service, Killable):
                raise ConfigError(f"nemesis: kill: {cfg.backend} cannot be killed")
            nemeses["kill"] = KillNemesis(service)
        elif fault == "partition":
            from clusters.partition import PartitionNemesis

            nemeses["partition"] = PartitionNemesis(cluster, servers, backends.RESOURCE_NODE,
                                                    run_id=run_id, ledger=ledger, rng=rng)
        elif fault == "clock":
            from clusters.clock import ClockNemesis

            nemeses["clock"] = ClockNemesis(clock, servers, lease_ms=cfg.lease_ms, rng=rng)
        elif fault == "failover":
            from clusters.sentinel import FailoverNemesis, SentinelService

            if not isinstance(service, SentinelService):
                raise ConfigError("nemesis: failover needs --backend redis-sentinel")
            nemeses["failover"] = FailoverNemesis(service)
    return nemeses


def _server_target(service: PausableService, node: str) -> PauseTarget:
    return PauseTarget(node, lambda: service.pause(node), lambda: service.resume(node))


def _loop(cfg: RunConfig, rng: random.Random, workers: list[_Worker], nemeses: dict[str, Any],
          nemesis_log: _EventLog, progress: ProgressFn, servers: list[str]) -> None:
    tailer = LogTailer()
    for w in workers:
        tailer.follow(w.name, w.events)
    schedule = _Schedule(cfg, rng)
    start = time.monotonic()
    deadline = start + cfg.time_limit_s
    next_fault = start + schedule.gap() if schedule.faults else float("inf")
    active: tuple[str, float] | None = None  # (fault, stop at)
    # Holder-aware timing: a fault waits (up to 3 s) for a fresh grant, so that it lands inside
    # a critical section; a pause then freezes exactly that holder.
    pending: tuple[str, float] | None = None  # (fault, give up waiting at)
    last_progress = 0.0
    window: list[tuple[float, int]] = []
    while True:
        now = time.monotonic()
        if now >= deadline:
            break
        fresh = tailer.poll()
        if active is None and pending is None and now >= next_fault:
            fault = schedule.pick()
            if cfg.pause_target == "holder" and fault != "failover":
                pending = (fault, now + 3.0)
            else:
                active = (fault, now + schedule.hold(fault))
                _start_fault(fault, _targets(cfg, fault, rng, workers, servers, tailer),
                             nemeses, nemesis_log)
        if pending is not None and (fresh or now >= pending[1]):
            fault = pending[0]
            pending = None
            if fault == "pause":
                holder = fresh[-1].worker if fresh else None
                if holder is None:
                    current = list(tailer.holding)
                    holder = rng.choice(current) if current else rng.choice(workers).name
                value: dict[str, Any] = {"targets": [holder]}
            else:
                value = _targets(cfg, fault, rng, workers, servers, tailer)
            active = (fault, now + schedule.hold(fault))
            _start_fault(fault, value, nemeses, nemesis_log)
        if active is not None and now >= active[1]:
            _stop_fault(active[0], nemeses, nemesis_log)
            active = None
            next_fault = now + schedule.gap()
        if now - last_progress >= 0.25:
            last_progress = now
            done = tailer.completed
            window.append((now, done))
            window = [x for x in window if now - x[0] <= 2.0]
            rate = (done - window[0][1]) / max(1e-9, now - window[0][0])
            progress(Progress("running", now - start, cfg.time_limit_s, rate,
                              tailer.counts["ok"], tailer.counts["fail"], tailer.counts["info"],
                              [active[0]] if active else []))
        time.sleep(0.005)
    if active is not None:
        _stop_fault(active[0], nemeses, nemesis_log)


def _targets(cfg: RunConfig, fault: str, rng: random.Random, workers: list[_Worker],
             servers: list[str], tailer: LogTailer) -> dict[str, Any]:
    if fault == "pause":
        if cfg.pause_target == "server":
            return {"targets": [rng.choice(servers)]}
        return {"targets": [rng.choice(workers).name]}
    if fault == "kill":
        # One node, or a majority (what it takes to lose a Redlock quorum's keys).
        count = 1 if len(servers) < 3 or rng.random() < 0.5 else len(servers) // 2 + 1
        return {"nodes": sorted(rng.sample(servers, count))}
    return {"holder": next(iter(tailer.holding), None),
            "clients": [w.name for w in workers]}


def _start_fault(fault: str, value: Any, nemeses: dict[str, Any], nlog: _EventLog) -> None:
    _nemesis_op(f"start-{fault}", fault, value, nemeses, nlog)


def _stop_fault(fault: str, nemeses: dict[str, Any], nlog: _EventLog) -> None:
    _nemesis_op(f"stop-{fault}", fault, None, nemeses, nlog)


def _nemesis_op(f: str, fault: str, value: Any, nemeses: dict[str, Any],
                nlog: _EventLog) -> None:
    """One nemesis op, logged as invoke and completion; a failed op is `info`, never fatal."""
    nlog.write("invoke", f, value)
    try:
        nlog.write("ok", f, nemeses[fault].invoke(NemesisOp(f, value)))
    except Interrupted:
        nlog.write("info", f, value, "interrupted")
        raise
    except Exception as e:
        log.exception("%s failed", f)
        nlog.write("info", f, value, str(e))


def _final_read(cfg: RunConfig, w: _Worker, run_dir: Path, copts: dict[str, Any],
                ropts: dict[str, Any], t0_ns: int) -> None:
    """Read every counter once more, after the faults are healed and the workers stopped."""
    fw = _Worker(w.name, w.node, run_dir / "final-read.json", run_dir / "final-read.jsonl")
    conf = _worker_config(cfg, 0, fw, copts, ropts, t0_ns)
    conf["process_base"] = FINAL_READ_PROCESS_BASE
    write_json(fw.config, conf)
    proc = _spawn(fw, run_dir, ("--final-read",))
    try:
        proc.wait(timeout=max(10.0, cfg.op_timeout_s * (cfg.locks + 2)))
    except subprocess.TimeoutExpired:
        log.warning("final read did not finish: killed")
        proc.kill()
        proc.wait()
