"""`SshRemote`: one host of the ssh runtime over one paramiko connection (commands as argv
joined with `shlex.join`, `sudo -n` when asked, files through SFTP), and what a daemon may need
installed there: `PACKAGES` (a binary or jar -> the Debian packages that provide it),
`wanted_paths`, `packages_for`. The runtime itself (`SshRuntime`) is in ssh.py.
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

import paramiko

from fencecheck.clusters.base import ClusterError, CommandResult, Daemon, RemoteError

log = logging.getLogger(__name__)

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
