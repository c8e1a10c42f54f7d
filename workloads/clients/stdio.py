"""`StdioClient`: a lock client in any language, run as a child program of the worker and spoken
to in JSON lines over its stdin/stdout (the protocol: docs/client-protocol.md; its JSON Schemas:
workloads/clients/schema/).

The worker keeps the resource I/O, the timing and the history; the program only takes, renews
and releases locks. One request is outstanding at a time. A reply that is not valid JSON of the
schema, no reply within the op's deadline, or the program's exit is an uncertain outcome: the op
is recorded `info`, the program is killed and a fresh one is started for the next op. The
program's stderr is the worker's stderr, so it lands in the run's `nodes/<client>/worker.log`.

A program may also write, at any time, a lost-lock notice line (`{"op": "notice", "lock",
"token", "reason"}`: its library told it the lock is lost or in doubt); a reader thread takes
each as it comes and gives it to the worker (workloads/notices.py), which records it then.

The program is the worker's child: the pause nemesis freezes the worker's whole process tree
(a paused worker's client must not keep renewing a lease), and PR_SET_PDEATHSIG kills the program
when the worker dies, so a SIGKILLed worker leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import selectors
import shlex
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fencecheck.workloads.base import DefiniteFailure, Grant, Indeterminate, WorkloadError
from fencecheck.workloads.evidence import EVIDENCE, anchor
from fencecheck.workloads.notices import Sink
from fencecheck.workloads.options import endpoints, op_timeout_s

log = logging.getLogger(__name__)

# A fresh program's first reply may include its start-up (a JVM, a Node runtime loading modules).
DEFAULT_START_TIMEOUT_S = 30.0
# Slack on top of each op's own timeout, for the round trip through the pipe.
DEFAULT_GRACE_S = 1.0
_PR_SET_PDEATHSIG = 1


def parse_cmd(cmd: str | Sequence[str]) -> list[str]:
    """A command line as a string (shell words, no shell) or an argv list."""
    argv = shlex.split(cmd) if isinstance(cmd, str) else [str(a) for a in cmd]
    if not argv:
        raise WorkloadError("options.cmd: empty client command")
    return argv


def die_with_parent() -> None:
    """For `preexec_fn`: the child is SIGKILLed when its parent (the worker) dies."""
    # Runs in the child between fork and exec: a SIGKILLed worker takes its program with it.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def client_env(options: Mapping[str, Any]) -> dict[str, str]:
    """What the program gets: FENCECHECK_ENDPOINTS ("host:port,..."), FENCECHECK_WORKER (the
    worker's number) and FENCECHECK_OPTIONS (every client option, as JSON)."""
    eps = ",".join(f"{h}:{p}" for h, p in endpoints(options))
    opts = {k: v for k, v in options.items() if k != "cmd"}
    return {
        "FENCECHECK_ENDPOINTS": eps,
        "FENCECHECK_WORKER": str(options.get("worker", 0)),
        "FENCECHECK_OPTIONS": json.dumps(opts, sort_keys=True),
    }


class _Program:
    """One running instance of the client program, and the reader of its stdout: a thread that
    reads whatever the program writes as it comes (so a notice is stamped when it arrives, even
    while no request is in flight) and queues the replies. Every read of the pipe is made under
    one lock, by the thread or by a caller waiting for a reply (its last look at its deadline),
    so a reply already in the pipe is never missed."""

    def __init__(self, argv: list[str], env: Mapping[str, str], cwd: str | None,
                 on_notice: Callable[[dict[str, Any]], None] | None = None) -> None:
        log.info("starting client program %s", argv)
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=None,  # the worker's own stderr: the run's worker.log
                env={**os.environ, **env},
                cwd=cwd,
                preexec_fn=die_with_parent,
            )
        except OSError as e:
            raise WorkloadError(f"cannot start client program {argv[0]!r}: {e}") from e
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin = self.proc.stdin
        self.stdout = self.proc.stdout
        os.set_blocking(self.stdout.fileno(), False)
        self.buffer = b""
        self.fresh = True
        self.on_notice = on_notice
        self.replies: deque[bytes] = deque()
        self.eof = self.closing = False
        self.cond = threading.Condition()
        self.reader = threading.Thread(target=self._read_on, name="stdio-reader", daemon=True)
        self.reader.start()

    def send(self, message: Mapping[str, Any]) -> None:
        self.stdin.write(json.dumps(message).encode() + b"\n")
        self.stdin.flush()

    def _pump(self) -> None:
        """Read what the pipe holds now, with `cond` held: replies queued, notices told."""
        while not self.eof:
            try:
                chunk = os.read(self.stdout.fileno(), 65536)
            except BlockingIOError:
                break
            except (OSError, ValueError):  # closed under us: the program is being killed
                chunk = b""
            if not chunk:
                self.eof = True
                break
            self.buffer += chunk
        while b"\n" in self.buffer:
            line, _, self.buffer = self.buffer.partition(b"\n")
            notice = _notice(line) if b'"notice"' in line else None
            if notice is None:
                self.replies.append(line)
            elif self.on_notice is not None:
                self.on_notice(notice)
        self.cond.notify_all()

    def _read_on(self) -> None:
        selector = selectors.DefaultSelector()
        try:
            selector.register(self.stdout, selectors.EVENT_READ)
            while not self.eof and not self.closing:
                if selector.select(0.5):
                    with self.cond:
                        self._pump()
        except (OSError, ValueError):  # the pipe was closed: the program is gone
            pass
        finally:
            selector.close()

    def read_line(self, deadline: float) -> bytes | None:
        """The next reply line, or None at the deadline. Raises EOFError when the program closed
        its stdout (it exited)."""
        with self.cond:
            while True:
                # A look of our own each time, the last one at the deadline: a worker resumed
                # from a pause finds the reply already waiting, though its clock says time is up.
                self._pump()
                if self.replies:
                    return self.replies.popleft()
                if self.eof:
                    raise EOFError
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)

    def kill(self) -> None:
        self.closing = True
        with contextlib.suppress(OSError):
            self.stdin.close()
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait()
        self.reader.join(timeout=2.0)
        with self.cond:
            self.stdout.close()

    def close(self, grace_s: float) -> None:
        """Ask it to stop (a `close` request, then EOF on stdin); kill it if it lingers."""
        with contextlib.suppress(OSError, ValueError):
            self.send({"op": "close", "id": 0})
            self.stdin.close()
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            log.info("client program %d did not exit: killed", self.proc.pid)
        self.kill()


def _notice(line: bytes) -> dict[str, Any] | None:
    """A notice line of the protocol (`{"op": "notice", "lock", "token", "reason"}`), or None
    for anything else (a reply, or garbage: the reply's parser names it)."""
    try:
        msg = json.loads(line)
    except ValueError:
        return None
    if not isinstance(msg, dict) or msg.get("op") != "notice":
        return None
    token = msg.get("token")
    if (not isinstance(msg.get("lock"), str) or not isinstance(msg.get("reason", ""), str)
            or (token is not None and (type(token) is not int))):
        return None  # not a notice of the schema: a protocol error, as any other line
    return msg


def parse_reply(line: bytes, request_id: int) -> dict[str, Any]:
    """Check one reply line against the protocol; anything else is a protocol error
    (`Indeterminate`: the op may or may not have happened)."""
    try:
        reply = json.loads(line)
    except ValueError:
        raise Indeterminate("client-protocol", f"not JSON: {line[:200]!r}") from None
    if not isinstance(reply, dict):
        raise Indeterminate("client-protocol", f"not a JSON object: {line[:200]!r}")
    if reply.get("id") != request_id:
        raise Indeterminate("client-protocol", f"reply id {reply.get('id')!r}, "
                            f"expected {request_id}")
    status = reply.get("status")
    if status not in ("ok", "fail", "info"):
        raise Indeterminate("client-protocol", f"status {status!r} not ok/fail/info")
    token = reply.get("token")
    if token is not None and (not isinstance(token, int) or isinstance(token, bool)):
        raise Indeterminate("client-protocol", f"token {token!r} is not an integer or null")
    attempt = reply.get("attempt_ns")
    if attempt is not None and (not isinstance(attempt, int) or attempt < 0):
        raise Indeterminate("client-protocol", f"attempt_ns {attempt!r} is not an integer >= 0")
    error = reply.get("error")
    if error is not None and not isinstance(error, str):
        raise Indeterminate("client-protocol", f"error {error!r} is not a string")
    evidence = reply.get("evidence")
    if evidence is not None and not isinstance(evidence, dict):
        raise Indeterminate("client-protocol", f"evidence {evidence!r} is not an object")
    return reply


def _ok_value(reply: Mapping[str, Any]) -> dict[str, Any] | None:
    """What an ok reply adds to the op's value: the program's evidence, if it sent any."""
    return {EVIDENCE: reply["evidence"]} if reply.get("evidence") else None


class StdioClient:
    """A `LockClient` backed by a program that speaks the stdio protocol.

    Options: `cmd` (a command line or argv list; required), `cwd`, `start_timeout_s`,
    `grace_s`, and the common `endpoints`, `op_timeout_s`, `worker`; all of them reach the
    program as FENCECHECK_OPTIONS."""

    name = "stdio"

    def __init__(self, options: Mapping[str, Any]) -> None:
        if "cmd" not in options:
            raise WorkloadError("the stdio client needs options.cmd (--client-cmd)")
        self.argv = parse_cmd(options["cmd"])
        self.env = client_env(options)
        self.cwd = options.get("cwd")
        self.op_timeout_s = op_timeout_s(options)
        self.start_timeout_s = float(options.get("start_timeout_s", DEFAULT_START_TIMEOUT_S))
        self.grace_s = float(options.get("grace_s", DEFAULT_GRACE_S))
        self.next_id = 1
        self.restarts = 0
        self.sink: Sink | None = None
        # Started now, so the first program's start-up happens before the first op.
        self.program: _Program | None = self._start()

    def _start(self) -> _Program:
        return _Program(self.argv, self.env, self.cwd, self._notice)

    def on_notice(self, sink: Sink) -> None:
        self.sink = sink

    def _notice(self, msg: dict[str, Any]) -> None:
        log.info("client program: notice %s", msg)
        if self.sink is not None:
            self.sink(msg["lock"], msg.get("token"), str(msg.get("reason", "")))

    def _call(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send one request, wait for its reply. `fail` raises DefiniteFailure; `info`, garbage,
        a timeout or an exit raise Indeterminate (and the program is replaced)."""
        if self.program is None:
            self.restarts += 1
            self.program = self._start()
        program = self.program
        request_id = self.next_id
        self.next_id += 1
        wait_s = timeout_s + self.grace_s + (self.start_timeout_s if program.fresh else 0.0)
        sent = time.monotonic_ns()
        try:
            program.send({**message, "id": request_id})
            line = program.read_line(time.monotonic() + wait_s)
            if line is None:
                raise Indeterminate("client-timeout", f"no reply to {message['op']} in "
                                    f"{wait_s:.1f} s")
            reply = parse_reply(line, request_id)
        except (BrokenPipeError, EOFError):
            self._replace(program)
            code = program.proc.returncode
            raise Indeterminate("client-exited", f"client program exited ({code})") from None
        except Indeterminate as e:
            log.warning("client program: %s: restarting it", e)
            self._replace(program)
            raise
        program.fresh = False
        evidence = anchor(reply["evidence"], sent) if reply.get("evidence") else None
        if reply["status"] == "fail":
            raise DefiniteFailure(reply.get("error") or "refused", evidence=evidence)
        if reply["status"] == "info":
            raise Indeterminate(reply.get("error") or "unknown", evidence=evidence)
        if reply.get("attempt_ns") is not None:
            reply["attempt_monotonic_ns"] = sent + int(reply["attempt_ns"])
        reply["evidence"] = evidence
        return reply

    def _replace(self, program: _Program) -> None:
        program.kill()
        if self.program is program:
            self.program = None

    def acquire(self, lock: str, lease_ms: int, timeout_s: float) -> Grant:
        reply = self._call({"op": "acquire", "lock": lock, "lease_ms": lease_ms,
                            "timeout_ms": int(timeout_s * 1000)}, timeout_s)
        return Grant(lock, reply.get("token"), lease_ms,
                     attempt_ns=reply.get("attempt_monotonic_ns"), evidence=_ok_value(reply))

    def renew(self, grant: Grant, lease_ms: int) -> Grant:
        reply = self._call({"op": "renew", "lock": grant.lock, "token": grant.token,
                            "lease_ms": lease_ms}, self.op_timeout_s)
        return Grant(grant.lock, grant.token, lease_ms, grant.handle, evidence=_ok_value(reply))

    def release(self, grant: Grant) -> Mapping[str, Any] | None:
        reply = self._call({"op": "release", "lock": grant.lock, "token": grant.token},
                           self.op_timeout_s)
        return _ok_value(reply)

    def close(self) -> None:
        if self.program is not None:
            self.program.close(self.grace_s + 1.0)
            self.program = None
