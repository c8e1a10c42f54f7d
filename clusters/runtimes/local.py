"""`LocalRemote`: a node that is this host (or this host inside a network namespace, through an
argv prefix such as `ip netns exec NS`). The netns runtime builds on it; tests of lock services
use it directly with loopback addresses (127.0.0.x)."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal as _signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from fencecheck.clusters.base import CommandResult, Daemon, RemoteError
from fencecheck.clusters.reaper import NETNS_DIR
from fencecheck.clusters.runtimes.zygote import (
    ForkedProcess,
    Zygote,
    ZygoteError,
    forkable,
    output_fds,
)

log = logging.getLogger(__name__)


class LocalRemote:
    """Runs commands on this host, optionally behind `prefix` (e.g. ["ip","netns","exec",ns])."""

    def __init__(self, name: str, address: str, prefix: Sequence[str] = (),
                 zygote: Callable[[], Zygote] | None = None) -> None:
        self.name = name
        self.address = address
        self.prefix = tuple(prefix)
        self._zygote = zygote  # the run's, started at its first use (netns nodes only)
        # Declared, so faults need not parse argv prefixes (the InNamespace protocol).
        self.namespace: str | None = (
            self.prefix[3] if len(self.prefix) == 4 and self.prefix[:3] == ("ip", "netns", "exec")
            else None
        )

    def _argv(self, argv: Sequence[str]) -> list[str]:
        return [*self.prefix, *argv]

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float = 30.0,
        check: bool = True,
        stdin: bytes | None = None,
    ) -> CommandResult:
        full = self._argv(argv)
        log.debug("%s: run %s", self.name, full)
        try:
            proc = subprocess.run(
                full,
                input=stdin,
                capture_output=True,
                timeout=timeout_s,
                stdin=None if stdin is not None else subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as e:
            res = CommandResult(self.name, tuple(argv), -1, _text(e.stdout), _text(e.stderr))
            raise RemoteError(res, f"timed out after {timeout_s} s") from None
        except OSError as e:
            res = CommandResult(self.name, tuple(argv), -1, "", str(e))
            raise RemoteError(res, "could not start") from None
        res = CommandResult(
            self.name, tuple(argv), proc.returncode, _text(proc.stdout), _text(proc.stderr)
        )
        if check and proc.returncode != 0:
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
        full = ["setsid", *self._argv(argv)]
        logging.getLogger(__name__).debug("%s: daemon %s: %s", self.name, name, full)
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                full,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **env} if env else None,
                cwd=cwd,
                start_new_session=False,
            )
        # setsid(1) execs in place when the child is not a group leader, so the pid is the daemon.
        return Daemon(node=self.name, name=name, pid=proc.pid, log=log)

    def signal(self, pid: int, sig: _signal.Signals) -> None:
        log.debug("%s: kill -%s %d", self.name, sig.name, pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)

    def alive(self, pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        try:  # a zombie is not alive
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    def preload(self, modules: Sequence[str]) -> None:
        """Import a worker's modules in the run's zygote (the Preloading protocol)."""
        if self._zygote is not None and self.namespace is not None:
            try:
                self._zygote().preload(modules)
            except (ZygoteError, OSError) as e:
                log.warning("%s: no zygote (%s): workers are exec'd", self.name, e)

    def put_file(self, local: Path, path: str) -> None:
        if Path(path).resolve() != local.resolve():
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(local, path)

    def get_file(self, path: str, local: Path) -> None:
        if Path(path).resolve() != local.resolve():
            local.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, local)

    def spawn(
        self,
        argv: Sequence[str],
        *,
        stdout: IO[bytes] | int | None = None,
        stderr: IO[bytes] | int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes] | ForkedProcess:
        target, fds = forkable(argv, env), output_fds(stdout, stderr)
        if (self._zygote is not None and self.namespace is not None and target is not None
                and fds is not None):
            try:
                child = self._zygote().spawn(
                    target[0], target[1], netns=str(NETNS_DIR / self.namespace),
                    stdout=fds[0], stderr=fds[1])
                log.debug("%s: forked %s (pid %d)", self.name, list(argv), child.pid)
                return child
            except (ZygoteError, OSError) as e:
                log.warning("%s: the zygote could not fork %s (%s): exec instead", self.name,
                            target[0], e)
        full = self._argv(argv)
        log.debug("%s: spawn %s", self.name, full)
        return subprocess.Popen(
            full,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            env={**os.environ, **env} if env else None,
        )


def _text(b: bytes | str | None) -> str:
    if b is None:
        return ""
    return b if isinstance(b, str) else b.decode(errors="replace")
