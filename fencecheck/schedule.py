"""The nemesis schedule of a run: seeded gaps and holds, holder-aware timing (a fault waits for a
fresh grant so that it lands inside a critical section), fault targets, and the log of every
nemesis op in the workers' event format."""

from __future__ import annotations

import json
import logging
import random
import time
from pathlib import Path
from typing import IO, Any

from fencecheck.clusters.base import NemesisOp
from fencecheck.config import RunConfig
from fencecheck.progress import Progress, ProgressFn
from fencecheck.signals import Interrupted
from fencecheck.tail import LogTailer
from fencecheck.workers import Worker

log = logging.getLogger(__name__)


class EventLog:
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
        elif fault in ("pause", "delay", "delay-service"):  # both must outlast the lease
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


def run_schedule(cfg: RunConfig, rng: random.Random, workers: list[Worker], nemeses: dict[str, Any],
          nemesis_log: EventLog, progress: ProgressFn, servers: list[str]) -> None:
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


def _targets(cfg: RunConfig, fault: str, rng: random.Random, workers: list[Worker],
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


def _start_fault(fault: str, value: Any, nemeses: dict[str, Any], nlog: EventLog) -> None:
    _nemesis_op(f"start-{fault}", fault, value, nemeses, nlog)


def _stop_fault(fault: str, nemeses: dict[str, Any], nlog: EventLog) -> None:
    _nemesis_op(f"stop-{fault}", fault, None, nemeses, nlog)


def _nemesis_op(f: str, fault: str, value: Any, nemeses: dict[str, Any],
                nlog: EventLog) -> None:
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


