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
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal as _signal
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import paramiko

from fencecheck.clusters.base import Cluster, ClusterError, CommandResult, Daemon, RemoteError
from fencecheck.clusters.cleaner import (
    Ledger,
    TeardownError,
    check_run_id,
    register_undo,
    teardown_records,
)
from fencecheck.clusters.faults.partition import chain_name
from fencecheck.clusters.runtimes.docker import undo_host_chain
from fencecheck.clusters.runtimes.local import LocalRemote
from fencecheck.clusters.runtimes.netns import NODE_RE
from fencecheck.clusters.runtimes.ssh_guard import add_guard, guard_chain, remove_guard

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10.0
APT_TIMEOUT_S = 600.0

# What a daemon's argv may name -> the Debian packages that provide it (what the services of
# clusters/ run, and the client tools they poll with). A daemon whose binary or jar is missing
# on a host gets these installed with apt-get, where the host has it.
PACKAGES: dict[str, tuple[str, ...]] = {
    "redis-server": ("redis-server", "redis-tools"),
    "/usr/bin/redis-server": ("redis-server", "redis-tools"),
    "redis-sentinel": ("redis-sentinel",),
    "/usr/bin/redis-sentinel": ("redis-sentinel",),
    "/usr/bin/etcd": ("etcd-server", "etcd-client"),
    "/usr/bin/java": ("default-jre-headless",),
    "/usr/share/java/zookeeper.jar": ("zookeeper",),
    "/usr/share/java/slf4j-simple.jar": ("libslf4j-java",),
    "/usr/lib/postgresql/15/bin/postgres": ("postgresql-15",),
}


def wanted_paths(argv: Sequence[str]) -> list[str]:
    """The known binaries and jars argv names (classpath entries included), in order."""
    out: list[str] = []
    for token in argv:
        for part in token.split(":") if ":" in token and "=" not in token else [token]:
            if part in PACKAGES and part not in out:
                out.append(part)
    return out


def packages_for(missing: Sequence[str]) -> list[str]:
    out: list[str] = []
    for path in missing:
        out += [p for p in PACKAGES[path] if p not in out]
    return out


class SshLedger(Ledger):
    """The run's ledger, but processes are recorded as `remote-process` with their host."""

    hosts: dict[str, str]
    local: frozenset[str] = frozenset()  # nodes on the controller: their pids are ours

    def record_process(self, node: str, name: str, pid: int) -> None:
        if node in self.local:
            super().record_process(node, name, pid)
            return
        self.record("remote-process", name, node=node, host=self.hosts.get(node, "?"), pid=pid)


class SshRemote:
    """A host over one paramiko connection. Thread-safe: each command is its own channel."""

    def __init__(self, name: str, address: str, client: paramiko.SSHClient,
                 sudo: bool = False, control_port: int = 22) -> None:
        self.name = name
        self.address = address
        self.control_port = control_port  # ControlChannel: partitions spare this session
        self.client = client
        self.sudo = sudo
        self._sftp: paramiko.SFTPClient | None = None
        self._present: set[str] = set()  # paths of PACKAGES known to exist on the host

    def _argv(self, argv: Sequence[str]) -> list[str]:
        return ["sudo", "-n", *argv] if self.sudo else list(argv)

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float = 30.0,
        check: bool = True,
        stdin: bytes | None = None,
    ) -> CommandResult:
        command = shlex.join(self._argv(argv))
        log.debug("%s: run %s", self.name, command)
        transport = self.client.get_transport()
        if transport is None or not transport.is_active():
            res = CommandResult(self.name, tuple(argv), -1, "", "ssh connection is closed")
            raise RemoteError(res, "could not start")
        chan = transport.open_session(timeout=timeout_s)
        out, err = bytearray(), bytearray()
        deadline = time.monotonic() + timeout_s
        try:
            chan.exec_command(command)
            if stdin is not None:
                chan.sendall(stdin)
            chan.shutdown_write()
            while True:
                busy = False
                if chan.recv_ready():
                    out += chan.recv(65536)
                    busy = True
                if chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
                    busy = True
                if chan.exit_status_ready() and not busy:
                    break
                if time.monotonic() > deadline:
                    res = CommandResult(self.name, tuple(argv), -1, out.decode(errors="replace"),
                                        err.decode(errors="replace"))
                    raise RemoteError(res, f"timed out after {timeout_s} s")
                if not busy:
                    time.sleep(0.001)
            chan.settimeout(max(0.1, deadline - time.monotonic()))
            while chunk := chan.recv(65536):  # what is left after the exit status
                out += chunk
            while chunk := chan.recv_stderr(65536):
                err += chunk
            code = chan.recv_exit_status()
        finally:
            chan.close()
        res = CommandResult(self.name, tuple(argv), code, out.decode(errors="replace"),
                            err.decode(errors="replace"))
        if check and code != 0:
            raise RemoteError(res)
        return res

    def start_daemon(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log: Path,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> Daemon:
        self.ensure(wanted_paths(argv))
        envargv = ["env", *(f"{k}={v}" for k, v in env.items())] if env else []
        script = ('cd "$1" || exit 1; log=$2; shift 2; mkdir -p "$(dirname "$log")"; '
                  'setsid nohup "$@" </dev/null >>"$log" 2>&1 & echo $!')
        res = self.run(["sh", "-c", script, "sh", cwd or "/", str(log), *envargv, *argv])
        out = res.stdout.strip()
        if not out.isdigit():
            raise RemoteError(res, f"could not start daemon {name}: no pid")
        return Daemon(node=self.name, name=name, pid=int(out), log=log)

    def ensure(self, paths: Sequence[str]) -> None:
        """Lock services are used as found; where a binary or jar is missing, its packages are
        installed with apt-get (with services kept from starting on install), if the host has
        apt-get. Else a ClusterError names what is missing."""
        want = [p for p in paths if p not in self._present]
        if not want:
            return
        probe = 'for p; do [ -e "$p" ] || command -v "$p" >/dev/null || echo "$p"; done'
        missing = self.run(["sh", "-c", probe, "sh", *want]).stdout.split()
        self._present.update(p for p in want if p not in missing)
        if not missing:
            return
        pkgs = packages_for(missing)
        if self.run(["sh", "-c", "command -v apt-get"], check=False).returncode != 0:
            raise ClusterError(f"{self.name}: {', '.join(missing)} missing and no apt-get: "
                               f"install {' '.join(pkgs)}")
        log.warning("%s: installing %s (missing: %s)", self.name, " ".join(pkgs),
                    ", ".join(missing))
        # policy-rc.d: the packages' postinst must not start a system-wide server on our ports.
        script = ('set -e; p=/usr/sbin/policy-rc.d; own=0; '
                  'if [ ! -e $p ]; then printf "#!/bin/sh\\nexit 101\\n" > $p; '
                  'chmod +x $p; own=1; fi; '
                  'trap \'if [ $own = 1 ]; then rm -f $p; fi\' EXIT; '
                  'export DEBIAN_FRONTEND=noninteractive; apt-get update -q; '
                  'apt-get install -y -q --no-install-recommends "$@"')
        self.run(["sh", "-c", script, "sh", *pkgs], timeout_s=APT_TIMEOUT_S)
        self._present.update(missing)

    def signal(self, pid: int, sig: _signal.Signals) -> None:
        res = self.run(["kill", "-s", sig.name.removeprefix("SIG"), str(pid)], check=False)
        if res.returncode != 0 and self.alive(pid):
            raise RemoteError(res, "signal failed")

    def alive(self, pid: int) -> bool:
        res = self.run(["ps", "-o", "stat=", "-p", str(pid)], check=False)
        return res.returncode == 0 and not res.stdout.strip().startswith("Z")

    def sftp(self) -> paramiko.SFTPClient:
        if self._sftp is None:
            self._sftp = self.client.open_sftp()
        return self._sftp

    def put_file(self, local: Path, path: str) -> None:
        data = local.read_bytes()  # first: the host may share this file system
        parent = os.path.dirname(path)
        if parent:
            self.run(["mkdir", "-p", parent])
        log.debug("%s: put %s -> %s", self.name, local, path)
        if self.sudo:
            self.run(["sh", "-c", 'cat > "$1"', "sh", path], stdin=data)
            return
        with self.sftp().open(path, "wb") as f:
            f.write(data)

    def get_file(self, path: str, local: Path) -> None:
        log.debug("%s: get %s -> %s", self.name, path, local)
        if self.sudo:
            data = self.run(["cat", path]).stdout.encode()
        else:
            with self.sftp().open(path, "rb") as f:
                data = f.read()
        local.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=local.parent, prefix=f".{local.name}.")
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, local)

    def close(self) -> None:
        if self._sftp is not None:
            with contextlib.suppress(Exception):
                self._sftp.close()
            self._sftp = None
        self.client.close()


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

