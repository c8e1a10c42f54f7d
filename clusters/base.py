"""Protocols of the cluster side: where nodes come from (Runtime, Remote), the lock services
on them (LockService and its optional capabilities), the network (Net) and faults (Nemesis).

A runtime makes nodes; a node is a `Remote` (servers) or a `ClientNode` (where one worker
process runs with its own address). Optional capabilities are separate protocols (Pausable,
Killable, LogFiles), as in Jepsen, rather than methods that raise.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol, runtime_checkable


class ClusterError(Exception):
    """Root error of the clusters package. The CLI prints it as one line and exits 3."""


@dataclass(frozen=True, slots=True)
class CommandResult:
    node: str
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class RemoteError(ClusterError):
    """A command on a node failed; keeps node, argv, exit status, stdout and stderr."""

    def __init__(self, result: CommandResult, what: str = "command failed") -> None:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        super().__init__(
            f"{result.node}: {what}: {' '.join(result.argv)} (exit {result.returncode})"
            + (f": {' / '.join(tail)}" if tail else "")
        )
        self.result = result


@dataclass(frozen=True, slots=True)
class Daemon:
    """A long-running process started on a node under setsid."""

    node: str
    name: str
    pid: int
    log: Path


class Remote(Protocol):
    """A server node: run commands, start daemons, signal processes, move files.

    Commands are argv lists, never shell strings. Implementations log every command at DEBUG
    with node and argv. No method may leave anything behind that `teardown` of the runtime
    cannot find again by name.
    """

    name: str
    address: str  # the address other nodes and clients reach this node on

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float = 30.0,
        check: bool = True,
        stdin: bytes | None = None,
    ) -> CommandResult:
        """Run argv to completion on the node. With check, a non-zero exit raises RemoteError."""
        ...

    def start_daemon(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log: Path,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> Daemon:
        """Start argv detached (setsid, stdin /dev/null, stdout+stderr to log); return at once."""
        ...

    def signal(self, pid: int, sig: signal.Signals) -> None:
        """Send sig to pid on the node. A process that is already gone counts as success."""
        ...

    def alive(self, pid: int) -> bool: ...

    def put_file(self, local: Path, path: str) -> None: ...

    def get_file(self, path: str, local: Path) -> None: ...


class ProcessHandle(Protocol):
    """What a run needs of a worker process it started: a `subprocess.Popen`, or a worker
    forked by the run's zygote (runtimes/zygote.py). `returncode` is None while it runs."""

    pid: int

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int:
        """The exit code; raises subprocess.TimeoutExpired after timeout."""
        ...

    def send_signal(self, sig: int) -> None: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


@runtime_checkable
class Preloading(Protocol):
    """A client node that can import a worker's modules before its workers start (so each
    worker need not): a hint, which a node may ignore."""

    def preload(self, modules: Sequence[str]) -> None: ...


class ClientNode(Protocol):
    """Where one worker runs with its own network identity (so a partition can cut off one
    client and SIGSTOP pauses exactly that client)."""

    name: str
    address: str

    def spawn(
        self,
        argv: Sequence[str],
        *,
        stdout: IO[bytes] | int | None = None,
        stderr: IO[bytes] | int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ProcessHandle:
        """Start argv for the controller; the handle's pid is the worker itself."""
        ...


@runtime_checkable
class ControlChannel(Protocol):
    """A node the controller drives over the network a partition cuts (an SSH host): the
    partition must spare that connection, or the controller loses the node it must heal."""

    control_port: int  # the node's TCP port the controller is connected to


@dataclass(slots=True)
class Cluster:
    servers: dict[str, Remote] = field(default_factory=dict)
    clients: dict[str, ClientNode] = field(default_factory=dict)


class Runtime(Protocol):
    """Makes and removes nodes. `setup` records every resource in the run's ledger before it
    creates it; `teardown` is idempotent and removes exactly what was recorded."""

    name: str

    def setup(self, servers: Sequence[str], clients: Sequence[str]) -> Cluster: ...

    def teardown(self) -> None: ...


Grudge = Mapping[str, frozenset[str]]  # node -> the nodes whose traffic it drops


class Net(Protocol):
    """Network faults between nodes. `heal` is idempotent and safe on every exit path."""

    def drop(self, grudge: Grudge) -> None: ...

    def heal(self) -> None: ...


class LockService(Protocol):
    """A lock service on some nodes. `setup` installs/configures and starts it and returns once
    it serves requests; `teardown` stops it (idempotent). Must not touch the nodes' network."""

    name: str

    def setup(self, nodes: Mapping[str, Remote], run_dir: Path) -> None: ...

    def endpoints(self) -> list[str]:
        """Addresses clients connect to, e.g. ["10.77.0.2:6379"]."""
        ...

    def teardown(self) -> None: ...


@runtime_checkable
class Pausable(Protocol):
    def pause(self, node: str) -> None: ...

    def resume(self, node: str) -> None: ...


@runtime_checkable
class Killable(Protocol):
    def kill(self, node: str) -> None: ...

    def restart(self, node: str) -> None: ...


@runtime_checkable
class DataDirs(Protocol):
    """A service whose node keeps its durable state in one data directory that can be placed
    before `setup` (the lose-unsynced fault puts it on its file system); its log and config
    stay elsewhere, so a lost write never takes the evidence with it."""

    def place_data(self, node: str, path: Path) -> None:
        """Before `setup`: keep node's durable state in `path`, an existing directory. Must not
        start anything."""
        ...


@runtime_checkable
class Reconfigurable(Protocol):
    """A service whose membership can change while it serves (etcd `member remove/add`,
    ZooKeeper's dynamic reconfiguration). A node holds at most one member at a time; a fresh
    member on a node is a new member (a new id, an empty data directory) at the same address."""

    def members(self) -> dict[str, str]:
        """node -> id of the member on it, for the members the service's configuration holds
        now (asked of the service, not remembered)."""
        ...

    def leader(self) -> str | None:
        """The node whose member leads now; None when none does."""
        ...

    def remove_member(self, node: str) -> dict[str, Any]:
        """Remove node's member from the configuration and stop its server; returns what the
        history records (the member's id, the configuration left). Must not touch other
        members."""
        ...

    def add_member(self, node: str) -> dict[str, Any]:
        """Make sure node holds a serving member: a fresh one (added to the configuration,
        started on an empty data directory) if it holds none; started again if it holds one
        that is not running. Returns once it serves; what the history records. Idempotent."""
        ...


@runtime_checkable
class HasPrimary(Protocol):
    """A service with one primary node at a time that can move (Sentinel): faults aimed at
    "the primary" ask it when they start."""

    def primary(self) -> str:
        """The node that is primary now; ClusterError when the service cannot say."""
        ...


@runtime_checkable
class LogFiles(Protocol):
    def log_files(self) -> dict[str, list[Path]]:
        """node -> log files already under the run directory (collected on teardown at the
        latest)."""
        ...


@dataclass(frozen=True, slots=True)
class NemesisOp:
    """A fault operation as the history records it (process "nemesis")."""

    f: str
    value: Any = None


class Nemesis(Protocol):
    """Injects and heals one kind of fault. `invoke` performs op and returns the value its
    completion records; `heal` undoes every fault still active, is idempotent, and runs on every
    exit path. A nemesis never changes the logical state of the lock service beyond its fault."""

    name: str

    def invoke(self, op: NemesisOp) -> Any: ...

    def heal(self) -> None: ...


class NoopNemesis:
    name = "none"

    def invoke(self, op: NemesisOp) -> Any:
        return None

    def heal(self) -> None:
        return None


@runtime_checkable
class ClientOptions(Protocol):
    """A service whose clients need more than its endpoints (e.g. Sentinel's master name)."""

    def client_options(self) -> dict[str, Any]: ...


@runtime_checkable
class InNamespace(Protocol):
    """A node whose commands run inside a network namespace of this host (None: the host's)."""

    namespace: str | None


def namespace_of(remote: object) -> str | None:
    """The network namespace a node lives in, if it declares one."""
    return remote.namespace if isinstance(remote, InNamespace) else None
