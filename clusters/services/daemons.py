"""Daemon bookkeeping shared by the services: stopping one daemon, starting one marked and
recorded in the run's ledger, `NodeDaemons`, a mixin for a service with one daemon per node
(pause, resume, kill, stop all), and `OneNode`, a mixin for a service on one node (its remote,
its folder, waiting until a probe of it answers).

`ProcessLedger` is the part of the run's ledger (clusters/cleaner.py `Ledger`) a service needs.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from fencecheck.clusters.base import ClusterError, Daemon, Remote

log = logging.getLogger(__name__)


class ProcessLedger(Protocol):
    """What a service needs of the run's ledger (clusters/cleaner.py `Ledger`): an environment
    marker for every process, and a record of each started pid."""

    def env(self) -> dict[str, str]: ...

    def record_process(self, node: str, name: str, pid: int) -> None: ...


def stop_daemon(remote: Remote, daemon: Daemon, sig: signal.Signals, wait_s: float) -> bool:
    """Send sig (after SIGCONT: a stopped process cannot act on SIGTERM), wait up to wait_s for
    it to exit, then SIGKILL. Returns True if it exited before the SIGKILL (or was already
    gone); raises ClusterError if it survives the SIGKILL for 5 s."""
    if not remote.alive(daemon.pid):
        return True
    remote.signal(daemon.pid, signal.SIGCONT)
    remote.signal(daemon.pid, sig)
    if _wait_gone(remote, daemon, wait_s):
        return True
    if sig != signal.SIGKILL:
        log.warning("%s: %s pid %d ignored %s for %.1f s; SIGKILL", daemon.node, daemon.name,
                    daemon.pid, sig.name, wait_s)
    remote.signal(daemon.pid, signal.SIGKILL)
    if not _wait_gone(remote, daemon, 5.0):
        raise ClusterError(f"{daemon.node}: {daemon.name} (pid {daemon.pid}) survived SIGKILL")
    return False


def _wait_gone(remote: Remote, daemon: Daemon, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while remote.alive(daemon.pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def start_recorded(
    remote: Remote,
    node: str,
    name: str,
    argv: Sequence[str],
    *,
    log: Path,
    env: Mapping[str, str] | None = None,
    ledger: ProcessLedger | None = None,
) -> Daemon:
    """Start a daemon with env plus the ledger's marker, and record its pid in the ledger (so
    that the run's teardown finds it even after a crash)."""
    full = {**(env or {}), **(ledger.env() if ledger is not None else {})}
    daemon = remote.start_daemon(name, argv, log=log, env=full or None)
    if ledger is not None:
        ledger.record_process(node, name, daemon.pid)
    return daemon


class NodeDaemons:
    """Mixin for a service with at most one daemon per node, in `self.daemons` (node name ->
    Daemon) and run on `self.nodes[node]`, with its files under `<run dir>/nodes/<node>/`. A node
    missing from `daemons` is killed (or was never started): pause and resume are no-ops there,
    since a nemesis may overlap pause and kill."""

    name: str
    nodes: dict[str, Remote]
    daemons: dict[str, Daemon]
    env_for: Callable[[str], Mapping[str, str]] | None
    ledger: ProcessLedger | None

    def init_daemons(
        self,
        node_count: int | None,
        env_for: Callable[[str], Mapping[str, str]] | None,
        ledger: ProcessLedger | None,
        keep_data: bool,
    ) -> None:
        """Set the bookkeeping attributes (call from __init__)."""
        self.node_count = node_count  # None: as many members as setup is given
        self.env_for = env_for
        self.ledger = ledger
        self.keep_data = keep_data
        self.nodes = {}
        self.run_dir: Path | None = None
        self.daemons = {}
        self.ready_s: float | None = None  # measured time from start to a ready service

    def adopt_nodes(self, nodes: Mapping[str, Remote], run_dir: Path) -> None:
        """Take setup's nodes and store, refusing a node count other than the one asked for."""
        if self.node_count is not None and len(nodes) != self.node_count:
            raise ClusterError(f"{self.name}: want {self.node_count} nodes, got {len(nodes)}")
        self.nodes = dict(nodes)
        self.run_dir = run_dir

    def _node_dir(self, node: str) -> Path:
        if self.run_dir is None:
            raise ClusterError(f"{self.name}: not set up")
        return self.run_dir / "nodes" / node

    def check_exited(self, nodes: list[str], log_name: str) -> None:
        """While waiting for readiness: fail at once if a node's daemon has exited."""
        for n in nodes:
            if n in self.daemons and not self.running(n):
                path = self._node_dir(n) / log_name
                raise ClusterError(f"{self.name} on {n} exited; see {path}{_tail(path)}")

    def pause(self, node: str) -> None:
        """SIGSTOP the node's daemon; a no-op while it is killed."""
        if node in self.daemons:
            self.nodes[node].signal(self.daemons[node].pid, signal.SIGSTOP)

    def resume(self, node: str) -> None:
        if node in self.daemons:
            self.nodes[node].signal(self.daemons[node].pid, signal.SIGCONT)

    def kill(self, node: str) -> None:
        """SIGKILL the node's daemon and wait until it is gone (so a restart can bind)."""
        daemon = self.daemons.pop(node, None)
        if daemon is not None:
            stop_daemon(self.nodes[node], daemon, signal.SIGKILL, wait_s=5.0)

    def running(self, node: str) -> bool:
        """True if the node has a daemon and it is alive."""
        return node in self.daemons and self.nodes[node].alive(self.daemons[node].pid)

    def stop_all(
        self, what: str, sig: signal.Signals = signal.SIGTERM, wait_s: float = 5.0
    ) -> None:
        """Stop every daemon, keep going past failures, and raise them together as one
        ClusterError ("<what> teardown: ..."). Idempotent: stopped daemons are forgotten."""
        errors: list[str] = []
        for node, daemon in list(self.daemons.items()):
            try:
                stop_daemon(self.nodes[node], daemon, sig, wait_s=wait_s)
            except ClusterError as e:
                errors.append(str(e))
            else:
                del self.daemons[node]
        if errors:
            raise ClusterError(f"{what} teardown: " + "; ".join(errors))

    def start_node_daemon(self, node: str, name: str, argv: Sequence[str], log: Path) -> None:
        """Start the node's daemon with `env_for(node)` and the ledger's marker."""
        env = self.env_for(node) if self.env_for is not None else None
        self.daemons[node] = start_recorded(
            self.nodes[node], node, name, argv, log=log, env=env, ledger=self.ledger
        )


def retried(what: str, attempt: Callable[[], bool], timeout_s: float) -> None:
    """Call `attempt` until it returns True (done, or found done already), through the errors
    of a service that is between leaders (ClusterError: a command that failed), for at most
    timeout_s; then raise the last error. Each attempt must check before it acts: an attempt
    whose reply was lost may have happened."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if attempt():
                return
            last: Exception | None = None
        except (ClusterError, ValueError) as e:
            last = e
        if time.monotonic() > deadline:
            raise ClusterError(f"{what}: not done after {timeout_s} s"
                               + (f": {last}" if last else ""))
        time.sleep(0.5)


class OneNode:
    """A service of one server on one node (mariadb, postgres): `_one_node` sets what its
    constructor takes, `_bring_up` is its setup's frame; `daemon` is its server while it runs,
    `what` names it in errors and logs."""

    what = "service"

    def _one_node(self, port: int, database: str, ready_timeout_s: float, keep_data: bool,
                  ledger: ProcessLedger | None) -> None:
        self.port = port
        self.database = database
        self.ready_timeout_s = ready_timeout_s
        self.keep_data = keep_data
        self.ledger = ledger
        self.node: str | None = None
        self.remote: Remote | None = None
        self.run_dir: Path | None = None
        self.daemon: Daemon | None = None
        self.ready_s: float | None = None

    def _bring_up(self, nodes: Mapping[str, Remote], run_dir: Path,
                  steps: Sequence[Callable[[], None]]) -> None:
        """The one node given to setup, then `steps` in order; the time they took is ready_s."""
        if len(nodes) != 1:
            raise ClusterError(f"{self.what}: want 1 node, got {len(nodes)}")
        self.node, self.remote = next(iter(nodes.items()))
        self.run_dir = run_dir
        t0 = time.monotonic()
        for step in steps:
            step()
        self.ready_s = time.monotonic() - t0
        log.info("%s on %s ready in %.2f s", self.what, self.node, self.ready_s)

    def endpoints(self) -> list[str]:
        if self.remote is None:
            return []
        return [f"{self.remote.address}:{self.port}"]

    def _remote(self) -> Remote:
        if self.remote is None:
            raise ClusterError(f"{self.what}: not set up")
        return self.remote

    def _dir(self) -> Path:
        if self.run_dir is None or self.node is None:
            raise ClusterError(f"{self.what}: not set up")
        return self.run_dir / "nodes" / self.node

    def _wait_answering(self, probe: Sequence[str], log_file: str, timeout_s: float) -> None:
        """Until `probe` exits 0 on the node; ClusterError once the server is gone (naming its
        log) or after timeout_s."""
        from fencecheck.clusters.base import RemoteError

        remote = self._remote()
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if remote.run(list(probe), timeout_s=5.0, check=False).returncode == 0:
                    return
            except RemoteError:
                pass
            if self.daemon is not None and not remote.alive(self.daemon.pid):
                raise ClusterError(f"{self.what} exited; see {self._dir() / log_file}")
            if time.monotonic() > deadline:
                raise ClusterError(f"{self.what} not ready after {timeout_s} s")
            time.sleep(0.1)


def _tail(path: Path, lines: int = 12) -> str:
    """The last lines of a daemon's log, to quote in the error that it exited (the run's folder
    may be gone by the time someone reads it: a test's temporary store); "" if unreadable here
    (a log on an SSH node)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 8192))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    last = text.splitlines()[-lines:]
    return ":\n" + "\n".join(f"  {line}" for line in last) if last else ""
