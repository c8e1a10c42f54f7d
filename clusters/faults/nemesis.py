"""Process faults as Nemesis objects: pause (SIGSTOP/SIGCONT) and kill/restart.

A nemesis performs one op at a time; the controller decides when and whom (the seeded schedule,
holder-aware targeting) and logs every op into the history. `heal` resumes/restarts whatever is
still faulted, is idempotent, and runs on every exit path.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fencecheck.clusters.base import ClusterError, Killable, NemesisOp

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PauseTarget:
    """Something that can be frozen: a worker process or a server."""

    name: str
    pause: Callable[[], None]
    resume: Callable[[], None]


def descendants(pid: int) -> list[int]:
    """The children of pid, their children, ... (from /proc; empty once pid is gone)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    kids = [int(c) for c in f.read().split()]
            except OSError:
                continue
            found.extend(kids)
            todo.extend(kids)
    return found


def process_target(name: str, pid: int) -> PauseTarget:
    """A local process (a worker: the controller's child, visible from the host's pid namespace)
    with its whole process tree: a worker's client program (workloads/clients/stdio.py) must
    freeze with it, or it would keep a paused holder's session or lease alive."""

    def send(sig: signal.Signals) -> None:
        # Stop from the top down and resume from the bottom up, so that the worker never runs
        # while its client program is still frozen.
        tree = [pid, *descendants(pid)]
        for p in tree if sig == signal.SIGSTOP else reversed(tree):
            log.debug("kill -%s %d (%s)", sig.name, p, name)
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, sig)

    return PauseTarget(name, lambda: send(signal.SIGSTOP), lambda: send(signal.SIGCONT))


class PauseNemesis:
    """`start-pause` with value {"targets": [names]} freezes them; `stop-pause` resumes all."""

    name = "pause"

    def __init__(self, targets: Mapping[str, PauseTarget]) -> None:
        self.targets = dict(targets)
        self.paused: dict[str, PauseTarget] = {}

    def invoke(self, op: NemesisOp) -> Any:
        if op.f == "start-pause":
            names = list(op.value["targets"])
            for n in names:
                t = self.targets.get(n)
                if t is None:
                    raise ClusterError(f"pause: unknown target {n!r}")
                self.paused[n] = t  # recorded before the signal: heal must find it
                t.pause()
            return {"paused": names}
        if op.f == "stop-pause":
            names = sorted(self.paused)
            self.heal()
            return {"resumed": names}
        raise ClusterError(f"pause nemesis: unknown op {op.f!r}")

    def heal(self) -> None:
        errors: list[str] = []
        for n, t in list(self.paused.items()):
            try:
                t.resume()
                del self.paused[n]
            except Exception as e:  # keep resuming the others; report all at the end
                errors.append(f"{n}: {e}")
        if errors:
            raise ClusterError("could not resume: " + "; ".join(errors))


class KillNemesis:
    """`start-kill` {"nodes": [...]} SIGKILLs servers; `stop-kill` restarts them on their data."""

    name = "kill"

    def __init__(self, service: Killable) -> None:
        self.service = service
        self.killed: list[str] = []

    def invoke(self, op: NemesisOp) -> Any:
        if op.f == "start-kill":
            nodes = list(op.value["nodes"])
            for n in nodes:
                self.killed.append(n)
                self.service.kill(n)
            return {"killed": nodes}
        if op.f == "stop-kill":
            nodes = list(self.killed)
            self.heal()
            return {"restarted": nodes}
        raise ClusterError(f"kill nemesis: unknown op {op.f!r}")

    def heal(self) -> None:
        errors: list[str] = []
        while self.killed:
            n = self.killed[0]
            try:
                self.service.restart(n)
            except Exception as e:
                errors.append(f"{n}: {e}")
            self.killed.pop(0)
        if errors:
            raise ClusterError("could not restart: " + "; ".join(errors))
