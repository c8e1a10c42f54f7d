"""A run's zygote, the controller's side (the process itself: zygote_main.py): one Python
process that imports a program's modules once and forks each client worker from itself, instead
of an interpreter started anew per worker (about 0.2 s of CPU of imports each, 900 workers in a
test run: docs/test-suite-cpu.md).

What a forked worker is and is not, against `ip netns exec NS python -m M ARGS`:
- The same: the module's `main(ARGS)` runs with the same interpreter, flags and environment
  (the controller's), in the node's network namespace (the
  child joins it with setns(2) before anything else), stdin on /dev/null, stdout and stderr
  where the caller said (the descriptors travel over the zygote's socket, SCM_RIGHTS), and its
  exit code is `main`'s return. `random` is reseeded in every child (CPython does so at fork).
- Not the same: no mount namespace of its own (`ip netns exec` remounts /sys and binds
  /etc/netns/NS; no worker reads either). A spawn with its own environment (a fault's
  `worker_env`, e.g. an LD_PRELOAD) cannot be forked and is exec'd as before, by the caller.

The zygote is a child of the controller on this host, recorded in the run's ledger; it exits
when its socket closes (the controller ended, however it ended), SIGKILLing every worker it
forked that still lives (SIGCONT first: a stopped process must not be left stopped). Its
children are reaped by it and their exit codes sent back, so a `ForkedProcess` polls and waits
like a `subprocess.Popen`.

Protocol (one SOCK_SEQPACKET message each, JSON): the controller sends
`{"id": n, "module": M, "args": [...], "netns": path | null}` with two descriptors (stdout,
stderr), or `{"preload": [module, ...]}`; the zygote answers `{"id": n, "pid": p}` or
`{"id": n, "error": text}`, and `{"exit": pid, "code": c}` when a child ends (c as Popen's
returncode: negative for a signal).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

log = logging.getLogger(__name__)

MAX_MSG = 1 << 16
READY_TIMEOUT_S = 30.0
MODULE = "fencecheck.clusters.runtimes.zygote_main"  # the zygote process
TITLE_ROOM = 400  # characters of a forked worker's command line that ps can show


class ForkedProcess:
    """A worker forked by a zygote: what the run needs of a `subprocess.Popen` (pid, poll,
    wait, send_signal, terminate, kill). Signals go to the pid only while its exit has not
    been reported: the zygote reaps the child before reporting, so until then the pid is
    still this child's (a zombie at worst) and never someone else's."""

    def __init__(self, pid: int, args: Sequence[str]) -> None:
        self.pid = pid
        self.args = list(args)
        self.returncode: int | None = None
        self._done = threading.Event()

    def _exited(self, code: int) -> None:
        self.returncode = code
        self._done.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ZygoteError(RuntimeError):
    pass


class Zygote:
    """The controller's handle on a zygote process. Thread-safe; `close` is idempotent and
    waits for the zygote to end (it kills what it forked that still lives)."""

    def __init__(self, stderr: Path, env: dict[str, str] | None = None) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        stderr.parent.mkdir(parents=True, exist_ok=True)
        with open(stderr, "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", MODULE, str(theirs.fileno()), " " * TITLE_ROOM],
                stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                pass_fds=(theirs.fileno(),), env={**os.environ, **env} if env else None)
        theirs.close()
        self._sock = ours
        self._lock = threading.Lock()
        self._next = 0
        self._replies: dict[int, dict[str, Any]] = {}
        self._cond = threading.Condition(self._lock)
        self._children: dict[int, ForkedProcess] = {}
        self._early: dict[int, int] = {}  # exits reported before the spawn's reply was read
        self._closed = False
        ready = self._recv(READY_TIMEOUT_S)
        if ready != {"ready": True}:
            self.close()
            raise ZygoteError(f"zygote did not start: {ready}")
        self._reader = threading.Thread(target=self._read, name="zygote-reader", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _recv(self, timeout: float | None) -> dict[str, Any] | None:
        r, _, _ = select.select([self._sock], [], [], timeout)
        if not r:
            return None
        data = self._sock.recv(MAX_MSG)
        return json.loads(data) if data else None

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(MAX_MSG)
            except OSError:
                data = b""
            with self._cond:
                if not data:
                    self._closed = True
                    for child in self._children.values():
                        if child.returncode is None:  # the zygote killed it on its way out
                            child._exited(-signal.SIGKILL)
                    self._cond.notify_all()
                    return
                msg = json.loads(data)
                if "exit" in msg:
                    pid, code = int(msg["exit"]), int(msg["code"])
                    ended = self._children.pop(pid, None)
                    if ended is None:
                        self._early[pid] = code
                    else:
                        ended._exited(code)
                else:
                    self._replies[int(msg["id"])] = msg
                    self._cond.notify_all()

    def preload(self, modules: Sequence[str]) -> None:
        """Import modules in the zygote before the next fork (an import that fails there is
        left to the child, which reports it as it would have)."""
        if modules:
            with self._lock:
                if not self._closed:
                    self._sock.send(json.dumps({"preload": list(modules)}).encode())

    def spawn(self, module: str, args: Sequence[str], *, netns: str | None,
              stdout: int, stderr: int) -> ForkedProcess:
        with self._cond:
            if self._closed:
                raise ZygoteError("the zygote has ended")
            self._next += 1
            n = self._next
            req = {"id": n, "module": module, "args": list(args), "netns": netns}
            socket.send_fds(self._sock, [json.dumps(req).encode()], [stdout, stderr])
            if not self._cond.wait_for(lambda: n in self._replies or self._closed,
                                       READY_TIMEOUT_S):
                raise ZygoteError(f"the zygote did not answer spawn {n}")
            if self._closed and n not in self._replies:
                raise ZygoteError("the zygote has ended")
            reply = self._replies.pop(n)
            if "error" in reply:
                raise ZygoteError(str(reply["error"]))
            pid = int(reply["pid"])
            child = ForkedProcess(pid, [sys.executable, "-m", module, *args])
            if pid in self._early:
                child._exited(self._early.pop(pid))
            else:
                self._children[pid] = child
            return child

    def close(self, timeout_s: float = 10.0) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("zygote %d did not end in %.0f s: SIGKILL", self.proc.pid, timeout_s)
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError):
            self._sock.close()


def forkable(argv: Sequence[str], env: object) -> tuple[str, list[str]] | None:
    """(module, args) when argv is `<this python> -m module args...` with no environment of its
    own: what a zygote can fork. None otherwise."""
    if env or len(argv) < 3 or argv[0] != sys.executable or argv[1] != "-m":
        return None
    return argv[2], list(argv[3:])


def output_fds(stdout: IO[bytes] | int | None,
               stderr: IO[bytes] | int | None) -> tuple[int, int] | None:
    """The descriptors a child's stdout and stderr go to, as Popen would take them (None: the
    caller's own; subprocess.STDOUT for stderr: wherever stdout goes), or None when one is a
    pipe, which a fork from the zygote cannot give back to the caller."""
    def fd(f: IO[bytes] | int | None, default: int) -> int:
        if f is None:
            return default
        return f if isinstance(f, int) else f.fileno()

    if subprocess.PIPE in (stdout, stderr) or subprocess.DEVNULL in (stdout, stderr):
        return None
    out = fd(stdout, 1)
    return out, (out if stderr == subprocess.STDOUT else fd(stderr, 2))
