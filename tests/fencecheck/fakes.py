"""In-memory fakes of a runtime, its nodes, a lock service, a resource and a fault, recording
every call in one shared log so that tests can assert the order of setup and teardown. The
client nodes start real (harmless) child processes, so the workers' stop path is the real one;
nothing here needs root or a server."""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from fencecheck.clusters.base import Cluster, ClusterError, CommandResult, Daemon
from fencecheck.descriptors.base import FaultDescriptor
from fencecheck.nemesis.faults.base import EnvFor, FaultContext, FaultOptions, ScheduleView
from fencecheck.run.config import RunConfig
from fencecheck.run.plan import Parts
from fencecheck.run.resources import ResourceStart

SLEEPER = "import time; time.sleep(120)"


@dataclass
class Calls:
    """The shared call log, and which calls should fail."""

    log: list[str] = field(default_factory=list)
    fail: set[str] = field(default_factory=set)

    def __call__(self, what: str) -> None:
        self.log.append(what)
        if what in self.fail:
            raise ClusterError(f"fake: {what} fails")

    def index(self, what: str) -> int:
        return self.log.index(what)


class FakeRemote:
    def __init__(self, name: str) -> None:
        self.name = name
        self.address = f"192.0.2.{len(name)}"

    def run(self, argv: Sequence[str], *, timeout_s: float = 30.0, check: bool = True,
            stdin: bytes | None = None) -> CommandResult:
        return CommandResult(self.name, tuple(argv), 0, "", "")

    def start_daemon(self, name: str, argv: Sequence[str], *, log: Path,
                     env: Mapping[str, str] | None = None, cwd: str | None = None) -> Daemon:
        return Daemon(self.name, name, 0, log)

    def signal(self, pid: int, sig: Any) -> None:
        return None

    def alive(self, pid: int) -> bool:
        return False

    def put_file(self, local: Path, path: str) -> None:
        return None

    def get_file(self, path: str, local: Path) -> None:
        return None


class FakeClientNode:
    """Spawns a sleeper in place of a worker, and an instant exit in place of the final read."""

    def __init__(self, name: str, calls: Calls) -> None:
        self.name = name
        self.address = "192.0.2.100"
        self.calls = calls

    def spawn(self, argv: Sequence[str], *, stdout: IO[bytes] | int | None = None,
              stderr: IO[bytes] | int | None = None,
              env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
        final = "--final-read" in argv
        self.calls(f"spawn {self.name}{' final-read' if final else ''}")
        # A blank line in its event log (the merge skips it) says "started", as a real worker's
        # first event does: the schedule's clock waits for that.
        events = Path(argv[-1]).parent / "events.jsonl"
        code = "pass" if final else f"open({str(events)!r}, 'a').write('\\n'); {SLEEPER}"
        return subprocess.Popen([sys.executable, "-c", code], stdout=stdout, stderr=stderr)


class FakeRuntime:
    name = "fake"
    ledger = None

    def __init__(self, calls: Calls) -> None:
        self.calls = calls

    def setup(self, servers: Sequence[str], clients: Sequence[str]) -> Cluster:
        self.calls(f"runtime.setup {','.join(servers)} {','.join(clients)}")
        return Cluster({n: FakeRemote(n) for n in servers},
                       {c: FakeClientNode(c, self.calls) for c in clients})

    def teardown(self) -> None:
        self.calls("runtime.teardown")


class FakeService:
    name = "fake"

    def __init__(self, calls: Calls, env_for: EnvFor | None) -> None:
        self.calls = calls
        self.env_for = env_for

    def setup(self, nodes: Mapping[str, Any], run_dir: Path) -> None:
        self.calls(f"service.setup {','.join(nodes)}")

    def endpoints(self) -> list[str]:
        return ["192.0.2.1:1"]

    def teardown(self) -> None:
        self.calls("service.teardown")


class FakeFault:
    """Records its lifecycle; holds briefly; its targets are drawn from the schedule's rng."""

    def __init__(self, name: str, calls: Calls) -> None:
        self.name = name
        self.calls = calls
        self.views: list[ScheduleView] = []

    def bind(self, ctx: FaultContext) -> None:
        self.calls(f"{self.name}.bind {','.join(sorted(ctx.workers))}")

    def hold_range_s(self) -> tuple[float, float]:
        return (0.05, 0.1)

    def targets(self, rng: random.Random, view: ScheduleView) -> Any:
        self.views.append(view)
        return {"node": rng.choice(list(view.servers))}

    def start(self, value: Any) -> Any:
        self.calls(f"{self.name}.start")
        return {"started": value}

    def stop(self) -> Any:
        self.calls(f"{self.name}.stop")
        return {"stopped": True}

    def heal(self) -> None:
        self.calls(f"{self.name}.heal")


def fake_parts(calls: Calls) -> Parts:
    def resource(cfg: RunConfig) -> Any:
        def start(s: ResourceStart) -> dict[str, Any]:
            s.stack.callback(calls, "resource.stop")  # the undo first, as real starters do
            calls(f"resource.start {s.node.name}")
            return {"address": "192.0.2.9:1", "fencing": s.fencing}
        return start

    def fault(d: FaultDescriptor, opts: FaultOptions) -> FakeFault:
        calls(f"{d.name}.build")
        return FakeFault(d.name, calls)

    return Parts(
        runtime=lambda cfg, run_id, run_dir: FakeRuntime(calls),
        service=lambda cfg, env_for, ledger: FakeService(calls, env_for),
        resource=resource,
        fault=fault,
        report=False,
    )
