"""The worker: one OS process per client that takes a lock, reads and writes the protected
counter in the critical section, releases, and logs every operation.

Run: `python -m fencecheck.workloads.loops.worker CONFIG.json [--final-read]` (exit 0 after
SIGTERM/SIGINT, 3 on a bad config). `WorkerConfig` is the config file's schema; `Worker` is
the loop, usable in-process.

The loop: acquire(L) -> k times (read L, think, write read+1, each with the token) -> release ->
idle. With `renew`, after each read and each write the worker renews if half a lease has passed
since its last successful acquire/renew invoke. After, not before: a real client's keepalive runs
beside its main thread, so after a GC pause the pending write goes out before anyone notices the
lease is gone; renewing first would hide exactly the stale write a pause causes. The worker is
deliberately not "smart": a lease that surely ran out by its own clock does not stop it. It does
listen to the services: a refused renew, read or write ends the section (then it releases, which
the owner check makes harmless), as does a lost-lock notice with `notices=stop`. After an `info`
the process id is retired (a new one follows, DESIGN.md) and the grant is dropped unreleased.

Other workloads subclass `Worker`, chosen by `WorkerConfig.workload` through their descriptor
(descriptors/workloads.py, or a plugin's entry point `fencecheck.workloads`): `leader`
(workloads/clients/leader.py) and `cron` (workloads/loops/cron.py); their options
(`--workload-opt`) are in `WorkerConfig.options`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import random
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Generic, Literal, TypeVar

from fencecheck.workloads.base import (
    Careless,
    DefiniteFailure,
    Grant,
    Indeterminate,
    LockClient,
    Resource,
    WorkloadError,
)
from fencecheck.workloads.eventlog import EventLog
from fencecheck.workloads.evidence import with_evidence
from fencecheck.workloads.notices import NoticeBoard
from fencecheck.workloads.registry import hosted, make_client, workload_class

log = logging.getLogger(__name__)

T = TypeVar("T")
Status = Literal["ok", "fail", "info"]


# Sleeps are cut into slices so a SIGTERM during think/idle time is noticed promptly.
_SLICE_S = 0.01


@dataclass(frozen=True)
class WorkerConfig:
    """One worker's configuration, as the controller writes it (JSON object, these keys)."""

    worker: int  # 0..concurrency-1
    concurrency: int
    process_base: int  # process id = process_base + worker + concurrency * generation
    client: str
    client_options: dict[str, Any]
    resource: str
    resource_options: dict[str, Any]
    locks: list[str]  # the key a lock protects has the lock's name
    lease_ms: int
    acquire_timeout_s: float
    think_ms: float
    writes_per_section: int
    idle_ms: float
    renew: bool
    log: str  # JSONL event log path
    t0_ns: int  # the controller's time.monotonic_ns() at run start
    seed: int
    op_timeout_s: float
    # Added later, so older config files (without them) still load: see `from_json`.
    # lock, leader (workloads/clients/leader.py) or cron (workloads/loops/cron.py)
    workload: str = "lock"
    idempotent: bool = False  # cron: the resource applies each job's effect at most once
    options: dict[str, Any] = dataclasses.field(default_factory=dict)  # the workload's own
    # "module:Class" of each, from the controller (registry.*_spec): the worker imports only
    # what it runs, not every descriptor. "" (older files): looked up by name.
    client_spec: str = ""
    resource_spec: str = ""
    worker_spec: str = ""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WorkerConfig:
        fields = dataclasses.fields(cls)
        names = [f.name for f in fields]
        optional = {f.name for f in fields if f.default is not dataclasses.MISSING
                    or f.default_factory is not dataclasses.MISSING}
        missing = [n for n in names if n not in data and n not in optional]
        unknown = sorted(set(data) - set(names))
        if missing or unknown:
            raise WorkloadError(f"worker config: missing {missing}, unknown {unknown}")
        config = cls(**{n: data[n] for n in names if n in data})
        config.validate()
        return config

    def validate(self) -> None:
        if not 0 <= self.worker < self.concurrency:
            raise WorkloadError(f"worker {self.worker} not in 0..{self.concurrency - 1}")
        if not self.locks or not all(isinstance(x, str) for x in self.locks):
            raise WorkloadError("locks must be a non-empty list of names")
        if self.lease_ms <= 0 or self.op_timeout_s <= 0 or self.writes_per_section < 0:
            raise WorkloadError("lease_ms and op_timeout_s must be > 0, writes_per_section >= 0")
        if not self.workload or not isinstance(self.options, dict):
            raise WorkloadError("workload must be named, options must be an object")
        workload_class(self.workload, self.worker_spec)  # no such workload: WorkloadError

    @classmethod
    def load(cls, path: str | Path) -> WorkerConfig:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise WorkloadError(f"worker config {path}: {e}") from e
        if not isinstance(data, dict):
            raise WorkloadError(f"worker config {path}: not a JSON object")
        return cls.from_json(data)

    def dump(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n", encoding="utf-8")


@dataclass(frozen=True)
class Outcome(Generic[T]):
    status: Status
    result: T | None
    invoke_time: int  # ns since t0


class Worker:
    """The loop of one worker. `stop` is polled between operations (the signal handler's flag)."""

    def __init__(
        self,
        config: WorkerConfig,
        client: LockClient | None,
        resource: Resource,
        events: EventLog,
        stop: Callable[[], bool] = lambda: False,
    ) -> None:
        self.config = config
        self.client = client
        self.resource = resource
        self.events = events
        self.stop = stop
        self.generation = 0
        self.rng = random.Random(config.seed * 1_000_003 + config.worker)
        self._lease_from = 0  # invoke time of the last successful acquire/renew
        self._careless: frozenset[str] = (client.careless if isinstance(client, Careless)
                                          else frozenset())
        self.notices = NoticeBoard.listen(self)  # the lock library's lost-lock notices

    @property
    def process(self) -> int:
        c = self.config
        return c.process_base + c.worker + c.concurrency * self.generation

    def _op(self, f: str, value: dict[str, Any], call: Callable[[], T],
            ok_value: Callable[[T], dict[str, Any]] | None = None) -> Outcome[T]:
        """One operation: invoke, call, completion. Never raises for a backend's sake."""
        process = self.process
        t = self.notices.invoke(f, value, lambda: self.events.write(process, "invoke", f, value))
        if t is None:  # a read or write of a grant told it is lost: none (workloads/notices.py)
            return Outcome("fail", None, self.events.now())
        try:
            result = call()
            # inside the try: a plugin's malformed result is recorded, not a crash
            done = value if ok_value is None else ok_value(result)
        except DefiniteFailure as e:
            self.events.write(process, "fail", f, with_evidence(value, e.evidence), e.error)
            return Outcome("fail", None, t)
        except Indeterminate as e:
            self.events.write(process, "info", f, with_evidence(value, e.evidence), e.error)
            self.generation += 1
            return Outcome("info", None, t)
        except Exception as e:
            log.warning("process %d %s %s: unexpected %r", process, f, value, e, exc_info=True)
            self.events.write(process, "info", f, value, f"{type(e).__name__}: {e}")
            self.generation += 1
            return Outcome("info", None, t)
        self.events.write(process, "ok", f, done)
        return Outcome("ok", result, t)

    def _sleep(self, ms: float) -> None:
        end = time.monotonic() + ms / 1000.0
        while not self.stop():
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, _SLICE_S))

    def run(self) -> None:
        """Critical sections until `stop()`; a held lock is released before returning."""
        assert self.client is not None, "run needs a lock client"
        while not self.stop():
            grant = self._acquire(self.rng.choice(self.config.locks))
            if grant is not None:
                grant = self._section(grant)
                if grant is not None:
                    self._release(grant)
            if self.stop():
                break
            self._sleep(self.config.idle_ms)

    def _acquire(self, lock: str) -> Grant | None:
        assert self.client is not None
        client, c = self.client, self.config
        out = self._op("acquire", {"lock": lock, "lease_ms": c.lease_ms},
                       lambda: client.acquire(lock, c.lease_ms, c.acquire_timeout_s),
                       lambda g: self._granted(lock, g))
        if out.status != "ok" or out.result is None:
            return None
        self._lease_from = max(out.invoke_time,  # from the winning attempt, where known
                               (out.result.attempt_ns or 0) - self.events.t0_ns)
        self.notices.granted(out.result)
        return out.result

    def _granted(self, lock: str, g: Grant) -> dict[str, Any]:
        """An acquire's ok value; `attempt_ns` on the history's clock where the client knows
        when its winning attempt was sent."""
        out: dict[str, Any] = {"lock": lock, "lease_ms": self.config.lease_ms, "token": g.token}
        if g.attempt_ns is not None:
            out["attempt_ns"] = max(0, g.attempt_ns - self.events.t0_ns)
        return {**out, **(g.evidence or {})}

    def _section(self, grant: Grant) -> Grant | None:
        """Reads and writes under `grant`. Returns the grant to release, or None to drop it."""
        for _ in range(self.config.writes_per_section):
            go, held = self._round(grant)
            if not go or held is None:
                return held
            grant = held
        return grant

    def _round(self, grant: Grant) -> tuple[bool, Grant | None]:
        """One read-think-write(read+1) round, renewing after each step. (True, grant) to go
        on; (False, grant to release or None to drop it) when the section must end."""
        read = self._read(grant)
        if read.status != "ok":
            return False, (grant if read.status == "fail" else None)
        go, grant = self._maybe_renew(grant)
        if go != "go" or self.stop():
            return False, (None if go == "drop" else grant)
        self._sleep(self.config.think_ms)
        if self.stop():
            return False, grant
        wrote = self._write(grant, (read.result or 0) + 1)
        if wrote.status != "ok":
            return False, (grant if wrote.status == "fail" else None)
        go, grant = self._maybe_renew(grant)
        if go != "go" or self.stop():
            return False, (None if go == "drop" else grant)
        return True, grant

    def _read(self, grant: Grant) -> Outcome[int | None]:
        res, key, token, lock = self.resource, grant.lock, grant.token, grant.lock
        return self._op(
            "read",
            {"key": key, "token": token, "lock": lock},
            lambda: res.read(key, token, lock),
            lambda v: {"key": key, "token": token, "lock": lock, "value": v},
        )

    def _write(self, grant: Grant, value: int) -> Outcome[None]:
        res, key, token, lock = self.resource, grant.lock, grant.token, grant.lock
        return self._op(
            "write",
            {"key": key, "value": value, "token": token, "lock": lock},
            lambda: res.write(key, value, token, lock),
        )

    def _maybe_renew(self, grant: Grant) -> tuple[Literal["go", "end", "drop"], Grant]:
        """Renew if half a lease has passed since the last acquire/renew invoke. "go" on,
        "end" the section (refused: release), "drop" the grant (info: the process retired)."""
        assert self.client is not None
        c, client = self.config, self.client
        if not c.renew or self.events.now() - self._lease_from < c.lease_ms * 500_000:
            return "go", grant
        value = {"lock": grant.lock, "token": grant.token, "lease_ms": c.lease_ms}
        out = self._op(
            "renew",
            value,
            lambda: client.renew(grant, c.lease_ms),
            lambda g: {**value, **(g.evidence or {})},
        )
        if out.status == "ok" and out.result is not None:
            self._lease_from = out.invoke_time
            return "go", out.result
        if out.status == "fail" and "work-after-failed-renew" in self._careless:
            return "go", grant  # the careless discipline under test: the refusal is ignored
        return ("drop" if out.status == "info" else "end"), grant

    def _release(self, grant: Grant) -> None:
        assert self.client is not None
        client = self.client
        value = {"lock": grant.lock, "token": grant.token}
        self._op(
            "release",
            value,
            lambda: client.release(grant),
            lambda evidence: {**value, **(evidence or {})},
        )

    def final_keys(self) -> list[str]:
        """The keys the controller's final observer read reads (one per lock here)."""
        return list(dict.fromkeys(self.config.locks))

    def final_read(self) -> None:
        """Read every key once with a null token (the controller's observer read)."""
        for key in self.final_keys():
            self._final_read(key)

    def _final_read(self, key: str) -> None:
        res = self.resource
        self._op("read", {"key": key, "token": None, "lock": None},
                 lambda: res.read(key, None, ""),
                 lambda v: {"key": key, "token": None, "lock": None, "value": v})


class _StopFlag:
    """Set by SIGTERM/SIGINT; the loop checks it between operations."""

    def __init__(self) -> None:
        self.set = False

    def __call__(self) -> bool:
        return self.set

    def handler(self, signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: stopping after the current operation", signum)
        self.set = True


def main(argv: list[str] | None = None) -> int:
    if __name__ == "__main__":  # run with -m: be the module the workloads' classes import
        sys.modules.setdefault("fencecheck.workloads.loops.worker", sys.modules[__name__])
    parser = argparse.ArgumentParser(prog="python -m fencecheck.workloads.loops.worker",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", help="WorkerConfig JSON file")
    parser.add_argument("--final-read", action="store_true",
                        help="read every key once with a null token, then exit")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    stop = _StopFlag()
    signal.signal(signal.SIGTERM, stop.handler)
    signal.signal(signal.SIGINT, stop.handler)
    try:
        config = WorkerConfig.load(args.config)
        options = {"op_timeout_s": config.op_timeout_s}
        client = None if args.final_read else make_client(
            config.client, {**options, **config.client_options}, config.client_spec)
        resource = hosted(client, config.resource, {**options, **config.resource_options},
                          config.resource_spec)
        worker_class = workload_class(config.workload, config.worker_spec)
    except WorkloadError as e:
        log.error("%s", e)
        return 3
    with EventLog(config.log, config.t0_ns) as events:
        try:
            worker: Worker = worker_class(config, client, resource, events, stop)
        except WorkloadError as e:  # the workload cannot run with this client or resource
            log.error("%s", e)
            if client is not None:
                client.close()
            resource.close()
            return 3
        try:
            if args.final_read:
                worker.final_read()
            else:
                worker.run()
        finally:
            if client is not None:
                client.close()
            resource.close()
    log.info("worker %d done", config.worker)
    return 0


if __name__ == "__main__":
    sys.exit(main())
