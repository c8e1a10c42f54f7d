"""`SshRuntime`: server nodes on existing hosts over SSH (paramiko), Jepsen style; `SshRemote`.

One host per server node, in the order given (`hosts`: "name-or-ip" or "host:port"). Clients,
and the nodes named in `local_nodes` (the resource, a Python process of this project, so that
hosts need no copy of it), run on the controller host, as in Jepsen: every such node is a
`LocalRemote` with the address the hosts see the controller on (the local end of the SSH
connection), so a partition cuts off all clients at once and `client-isolate` acts on this
host's own iptables (chain FC-<run>). The controller's SSH session shares that address: every
`SshRemote` is a `ControlChannel`, whose session the partition's rules let through.

Safety: host keys are checked against `known_hosts` (the given file, else ~/.ssh/known_hosts);
an unknown key is refused with a ClusterError naming the host and `--ssh-accept-unknown`, which
opts out (with a warning per host). A changed key is always refused. Every command is an argv
list joined with `shlex.join`, never a string built from input; `sudo` prefixes `sudo -n`.

Files: services write under the run's store path; on a host that is the same path, made with
`mkdir -p`. `put_file`/`get_file` go through SFTP (through `sudo -n cat` when `sudo`, since SFTP
cannot write root's files); both read the whole source before writing, so a host that shares
this host's file system (the tests' sshd namespaces) cannot truncate its own source. At
teardown every `*.log` under `<run dir>/nodes/<node>/` on the host is downloaded into the store,
only into that node's own folder (`log_destination`: a printed path such as `…/nodes/n1/../../x`
is refused and logged).

Guard: the lock services' ports on each host answer only the test's addresses (the hosts and
the controller) and loopback (`ssh_guard.py`: a chain FCG-<run>, recorded as `remote-guard`).

The ledger records server processes as `remote-process` (their pids are the host's, not ours:
the local cleaner must never kill by them) and hosts as `ssh-node`; `teardown` kills the
recorded processes and removes our iptables chain on each host while connected. After a
controller crash, `fencecheck teardown` cannot reach the hosts (it holds no credentials): it
logs what is left on which host.

The host side (`SshRemote`, and the packages a daemon may need there) is in ssh_remote.py.
"""

from __future__ import annotations

import logging
import signal as _signal
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import paramiko

from fencecheck.clusters.base import Cluster, ClusterError, RemoteError
from fencecheck.clusters.cleaner import (
    Ledger,
    TeardownError,
    check_run_id,
    register_undo,
    teardown_records,
)
from fencecheck.clusters.faults.partition import chain_name
from fencecheck.clusters.runtimes.docker_host import undo_host_chain
from fencecheck.clusters.runtimes.local import LocalRemote
from fencecheck.clusters.runtimes.netns import NODE_RE
from fencecheck.clusters.runtimes.ssh_guard import add_guard, guard_chain, remove_guard
from fencecheck.clusters.runtimes.ssh_remote import SshRemote

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10.0


class SshLedger(Ledger):
    """The run's ledger, but processes are recorded as `remote-process` with their host."""

    hosts: dict[str, str]
    local: frozenset[str] = frozenset()  # nodes on the controller: their pids are ours

    def record_process(self, node: str, name: str, pid: int) -> None:
        if node in self.local:
            super().record_process(node, name, pid)
            return
        self.record("remote-process", name, node=node, host=self.hosts.get(node, "?"), pid=pid)


class _Refuse(paramiko.MissingHostKeyPolicy):
    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
                         ) -> None:
        raise ClusterError(
            f"ssh: host key of {hostname} ({key.get_name()}) is not in known_hosts: refused; "
            "add it (ssh-keyscan) or pass --ssh-accept-unknown to trust it for this run"
        )


class _Warn(paramiko.MissingHostKeyPolicy):
    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
                         ) -> None:
        log.warning("ssh: accepting UNVERIFIED host key of %s (%s %s): --ssh-accept-unknown",
                    hostname, key.get_name(), key.get_base64()[:24])


def split_host(spec: str, port: int) -> tuple[str, int]:
    host, sep, p = spec.rpartition(":")
    if sep and p.isdigit() and host and "]" not in p:
        return host.strip("[]"), int(p)
    return spec, port


class SshRuntime:
    """Runtime on existing hosts over SSH. See the module docstring."""

    name = "ssh"

    def __init__(self, run_id: str, run_dir: Path, *, hosts: Sequence[str], user: str | None = None,
                 key: Path | None = None, port: int = 22, sudo: bool = False,
                 accept_unknown: bool = False, known_hosts: Path | None = None,
                 local_nodes: Sequence[str] = ()) -> None:
        self.run_id = check_run_id(run_id)
        self.run_dir = run_dir
        self.hosts = list(hosts)
        self.user = user
        self.key = key
        self.port = port
        self.sudo = sudo
        self.accept_unknown = accept_unknown
        self.known_hosts = known_hosts
        self.ledger = SshLedger(run_dir / "ledger.jsonl", run_id)
        self.ledger.hosts = {}
        self.ledger.local = frozenset(local_nodes)
        self._remotes: dict[str, SshRemote] = {}
        self._done: set[str] = set()  # nodes whose processes and chain teardown removed

    def remote(self, node: str) -> SshRemote:
        try:
            return self._remotes[node]
        except KeyError:
            raise ClusterError(f"no node {node!r} in run {self.run_id}") from None

    def connect(self, node: str, spec: str) -> SshRemote:
        host, port = split_host(spec, self.port)
        client = paramiko.SSHClient()
        path = self.known_hosts or Path.home() / ".ssh" / "known_hosts"
        if path.exists():
            client.load_host_keys(str(path))
        elif self.known_hosts is not None:
            raise ClusterError(f"ssh: known_hosts file {path} does not exist")
        client.set_missing_host_key_policy(_Warn() if self.accept_unknown else _Refuse())
        try:
            client.connect(host, port=port, username=self.user,
                           key_filename=str(self.key) if self.key else None,
                           timeout=CONNECT_TIMEOUT_S, banner_timeout=CONNECT_TIMEOUT_S,
                           auth_timeout=CONNECT_TIMEOUT_S, allow_agent=self.key is None,
                           look_for_keys=self.key is None)
        except paramiko.BadHostKeyException as e:
            client.close()
            raise ClusterError(f"ssh: host key of {host} CHANGED ({e}): refused") from None
        except ClusterError:
            client.close()
            raise
        except (paramiko.SSHException, OSError) as e:
            client.close()
            raise ClusterError(f"ssh: cannot connect to {host}:{port}: {e}") from None
        transport = client.get_transport()
        assert transport is not None
        address = str(transport.getpeername()[0])
        return SshRemote(node, address, client, self.sudo, control_port=port)

    def setup(self, servers: Sequence[str], clients: Sequence[str]) -> Cluster:
        if self._remotes:
            raise ClusterError(f"ssh run {self.run_id} is already set up")
        for node in [*servers, *clients]:
            if not NODE_RE.match(node):
                raise ClusterError(f"bad node name {node!r}: want [a-z0-9-]")
        if not self.run_dir.is_absolute():
            # Services name files by the store's path, which on a host is relative to the
            # login directory: it would not be the store.
            raise ClusterError(f"ssh: the store path must be absolute, not {self.run_dir}")
        local = [n for n in servers if n in self.ledger.local]
        remote = [n for n in servers if n not in self.ledger.local]
        if len(self.hosts) < len(remote):
            raise ClusterError(
                f"ssh: {len(remote)} server nodes ({', '.join(remote)}) need as many hosts; "
                f"got {len(self.hosts)} (--hosts)"
            )
        t0 = time.monotonic()
        cluster = Cluster()
        for node, spec in zip(remote, self.hosts, strict=False):
            self.ledger.hosts[node] = spec
            self.ledger.record("ssh-node", node, host=spec, user=self.user, port=self.port)
            r = self.connect(node, spec)
            self._remotes[node] = r
            cluster.servers[node] = r
        first = self._remotes[remote[0]] if remote else None
        controller = "127.0.0.1"
        if first is not None:
            transport = first.client.get_transport()
            assert transport is not None
            controller = str(transport.sock.getsockname()[0])  # type: ignore[union-attr]
        for c in clients:
            cluster.clients[c] = LocalRemote(c, controller)
        for n in local:  # the resource: the project runs here, hosts need no copy of it
            cluster.servers[n] = LocalRemote(n, controller)
        allowed = [controller, *(r.address for r in self._remotes.values())]
        for node, r in self._remotes.items():
            # Recorded first: teardown must find a half-made guard.
            self.ledger.record("remote-guard", guard_chain(self.run_id), node=node,
                               host=self.ledger.hosts.get(node, "?"))
            try:
                add_guard(r, guard_chain(self.run_id), allowed)
            except RemoteError as e:
                raise ClusterError(f"ssh: {node}: cannot keep the services' ports to this "
                                   f"test's addresses (iptables): {e}") from None
        log.info("ssh run %s: %d hosts connected in %.0f ms; clients on %s", self.run_id,
                 len(servers), 1000 * (time.monotonic() - t0), controller)
        return cluster

    def teardown(self) -> None:
        """Kill recorded processes and remove our chain on every connected host, download the
        logs, close the connections, then replay the ledger. Idempotent."""
        errors: list[str] = []
        records = self.ledger.records()
        chain = chain_name(self.run_id)
        self._done |= set(self._remotes)
        for node, remote in self._remotes.items():
            pids = [int(r["pid"]) for r in records
                    if r.get("kind") == "remote-process" and r.get("node") == node]
            try:
                for sig in (_signal.SIGCONT, _signal.SIGKILL):
                    for pid in pids:
                        remote.signal(pid, sig)
                if any(r.get("kind") == "remote-guard" and r.get("node") == node
                       for r in records):
                    remove_guard(remote, guard_chain(self.run_id))
                if any(r.get("kind") == "remote-chain" and r.get("node") == node
                       for r in records):
                    remote.run(["iptables", "-w", "-D", "INPUT", "-j", chain], check=False)
                    remote.run(["iptables", "-w", "-F", chain], check=False)
                    remote.run(["iptables", "-w", "-X", chain], check=False)
                self._download_logs(node, remote)
            except (ClusterError, paramiko.SSHException, OSError) as e:
                errors.append(f"{node}: {e}")
            remote.close()
        self._remotes.clear()
        # What was handled above over a live connection is done; the rest (a node whose
        # connection never came up) is only reported by the ledger's undo.
        left = [r for r in records
                if not (r.get("kind") in ("remote-process", "remote-guard")
                        and r.get("node") in self._done)]
        teardown_records(left, errors)
        if errors:
            raise TeardownError(errors)
        self.ledger.unregister()

    def _download_logs(self, node: str, remote: SshRemote) -> None:
        d = self.run_dir.resolve() / "nodes" / node
        res = remote.run(["find", str(d), "-maxdepth", "2", "-name", "*.log", "-type", "f"],
                         check=False)
        for line in res.stdout.splitlines():
            local = log_destination(d, line)
            if local is None:
                log.warning("ssh: %s printed a log path outside its folder %s: %r not "
                            "downloaded", node, d, line)
                continue
            local.parent.mkdir(parents=True, exist_ok=True)
            remote.get_file(line, local)


def log_destination(node_dir: Path, printed: str) -> Path | None:
    """Where a log path a host printed may be downloaded to: the same path, only if it is a
    `*.log` file inside the node's own folder (at most two levels down, as asked of `find`),
    with no `..`, `.` or empty component, and no local symlink on the way out of it. Anything
    else is None: a host (or a file name with a newline) must not make the controller write
    outside the node's folder."""
    if not printed.startswith(str(node_dir) + "/") or "\x00" in printed:
        return None
    rel = printed[len(str(node_dir)) + 1:]
    parts = rel.split("/")
    if not 1 <= len(parts) <= 2 or any(p in ("", ".", "..") for p in parts):
        return None
    if not parts[-1].endswith(".log"):
        return None
    local = node_dir / Path(*parts)
    # A symlink already in the store (nodes/n1/x -> /etc) would redirect the write.
    if local.parent.exists() and not local.parent.resolve().is_relative_to(node_dir.resolve()):
        return None
    if local.is_symlink():
        return None
    return local


def _left_on_host(rec: Mapping[str, Any]) -> str | None:
    """After a crash the cleaner cannot reach an ssh host: say what may be left there."""
    log.warning("ssh: %s %s (pid %s) may be left on host %s of node %s", rec.get("kind"),
                rec.get("name"), rec.get("pid", "-"), rec.get("host", "?"), rec.get("node"))
    return None


register_undo("remote-process", _left_on_host)
register_undo("remote-guard", _left_on_host)
register_undo("ssh-node", lambda rec: None)
register_undo("remote-chain", undo_host_chain)

