"""The client worker processes of a run: their configs, spawning each on its client node,
stopping them (resumed first: a SIGSTOPped process ignores SIGTERM until resumed), and the final
read of every counter once the faults are healed."""

from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fencecheck.clusters.base import ClientNode, ClusterError, Preloading, ProcessHandle
from fencecheck.descriptors.base import FaultDescriptor
from fencecheck.nemesis.faults.base import Fault, WorkerEnv
from fencecheck.records.history import FINAL_READ_PROCESS_BASE as FINAL_READ_PROCESS_BASE
from fencecheck.run.config import RunConfig
from fencecheck.run.store import write_json
from fencecheck.workloads.loops.worker import WorkerConfig
from fencecheck.workloads.registry import client_spec, resource_spec, workload_spec

log = logging.getLogger(__name__)



@dataclass(slots=True)
class WorkerProcess:
    name: str
    node: ClientNode
    config: Path
    events: Path
    proc: ProcessHandle | None = None


def worker_config(cfg: RunConfig, i: int, w: WorkerProcess, copts: dict[str, Any],
                  ropts: dict[str, Any], t0_ns: int, process_base: int = 0) -> WorkerConfig:
    """Worker i's configuration: the record its process reads (workloads.worker owns it). The
    workload's options go in whole (`options`); the built-in loops read theirs from the fields
    of the same names (a workload without one runs with the neutral value)."""
    opts = cfg.workload_options
    spec, named = client_spec(cfg.client_name)
    config = WorkerConfig(
        worker=i,
        concurrency=cfg.concurrency,
        process_base=process_base,
        client=cfg.client_name,
        client_options={**copts, **named, "worker": i},  # which endpoint it tries first
        resource=cfg.resource,
        resource_options=ropts,
        locks=[f"lock-{j}" for j in range(cfg.locks)],
        lease_ms=cfg.lease_ms,
        acquire_timeout_s=float(opts.get("acquire_timeout_s", 5.0)),
        think_ms=float(opts.get("think_ms", 0.0)),
        writes_per_section=int(opts.get("writes_per_section", 1)),
        idle_ms=float(opts.get("idle_ms", 0.0)),
        renew=bool(opts.get("renew", False)),
        log=str(w.events),
        t0_ns=t0_ns,
        seed=cfg.seed * 1000 + i,
        op_timeout_s=cfg.op_timeout_s,
        workload=cfg.workload,
        idempotent=bool(opts.get("idempotent", False)),
        options=dict(opts),
        client_spec=spec,
        resource_spec=resource_spec(cfg.resource),
        worker_spec=workload_spec(cfg.workload),
    )
    config.validate()
    return config


def preload(workers: Sequence[WorkerProcess], config: WorkerConfig) -> None:
    """Let each node that can import the worker's modules before it starts (a hint: a node may
    ignore it). The modules are the worker loop's and those its config names."""
    specs = (config.client_spec, config.resource_spec, config.worker_spec)
    modules = ["fencecheck.workloads.loops.worker",
               *(s.partition(":")[0] for s in specs if s)]
    for node in {id(w.node): w.node for w in workers}.values():
        if isinstance(node, Preloading):
            node.preload(modules)


def write_worker_config(config: WorkerConfig, path: Path) -> None:
    write_json(path, config.to_json())


def spawn(w: WorkerProcess, run_dir: Path, extra: tuple[str, ...] = (),
          env: Mapping[str, str] | None = None) -> ProcessHandle:
    with open(run_dir / "nodes" / w.name / "worker.log", "ab") as out:
        return w.node.spawn(
            [sys.executable, "-m", "fencecheck.workloads.loops.worker", str(w.config), *extra],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )


def worker_env(descriptors: Sequence[FaultDescriptor], faults: Mapping[str, Fault],
               stack: ExitStack) -> Callable[[str], Mapping[str, str]]:
    """env_for(worker) from the faults whose descriptor declares `worker_env`."""
    given: list[Callable[[str], Mapping[str, str]]] = []
    for d in descriptors:
        fault = faults[d.name]
        if d.worker_env:
            if not isinstance(fault, WorkerEnv):
                raise ClusterError(f"fault {d.name}: declares worker_env but its Fault has no "
                                   "worker_env method")
            given.append(fault.worker_env(stack))
    return lambda name: {k: v for env_for in given for k, v in env_for(name).items()}


def stop_workers(workers: list[WorkerProcess], grace_s: float) -> None:
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


def final_read(cfg: RunConfig, w: WorkerProcess, run_dir: Path, copts: dict[str, Any],
                ropts: dict[str, Any], t0_ns: int) -> None:
    """Read every counter once more, after the faults are healed and the workers stopped."""
    fw = WorkerProcess(w.name, w.node, run_dir / "final-read.json", run_dir / "final-read.jsonl")
    write_worker_config(worker_config(cfg, 0, fw, copts, ropts, t0_ns,
                                      process_base=FINAL_READ_PROCESS_BASE), fw.config)
    proc = spawn(fw, run_dir, ("--final-read",))
    try:
        proc.wait(timeout=max(10.0, cfg.op_timeout_s * (cfg.locks + 2)))
    except subprocess.TimeoutExpired:
        log.warning("final read did not finish: killed")
        proc.kill()
        proc.wait()
