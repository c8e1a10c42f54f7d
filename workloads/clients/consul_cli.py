"""`ConsulLockClient` ("consul-lock"): `consul lock` itself, HashiCorp's command that takes a lock
(a session, and the KV key `<prefix>/.lock` acquired with it) and runs a child process while it
holds it. When it sees the lock lost it sends the child SIGTERM, then SIGKILL after 5 s; the
child is told nothing else (only CONSUL_LOCK_HELD=true in its environment).

Here the child is the critical section: a grant's reads and writes are carried out by its child
(workloads/clients/child_section.py), so what `consul lock` lets its child do after the lock has
gone is exactly what lands in the resource.

- acquire: start `consul lock -timeout=<acquire timeout> -shell=false -http-addr=<server>
  -name=<unique> fencecheck/<lock> <child>`; granted when the child reports in. `consul lock`
  exiting first: "timeout during lock acquisition" is a definite refusal, anything else (it may
  have acquired before it failed) uncertain, as is no word by the deadline (it is then stopped).
- renew: refused (`DefiniteFailure("renews-itself")`, which ends the section): `consul lock`
  renews its own session every 7.5 s and offers no way to renew it from outside.
- release: close the child's socket; the child exits, and `consul lock` releases the key,
  destroys its session, deletes the key unless another waits on it, and exits. Ok when it exits
  0 in time; otherwise uncertain.
- token: none (nothing in the child's world grows with each grant).
- lease: `consul lock` fixes its session's TTL at 15 s (the api's DefaultLockSessionTTL; the
  server invalidates a session after twice its TTL without renewal) and leaves lock-delay at the
  server's 15 s. The checker's lease is the run's `--lease-ms`; above 15000 ms it would claim
  more than Consul keeps, so `settings` refuses it before a run starts.

Options: `consul_binary` (the service's), `endpoints` (servers' HTTP addresses; worker i talks
to server i mod n), `worker`, `op_timeout_s`. A killed worker takes `consul lock` with it
(PR_SET_PDEATHSIG), and its child exits when its socket closes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO, Any

from fencecheck.workloads.base import (
    DefiniteFailure,
    Grant,
    Indeterminate,
    Resource,
    WorkloadError,
)
from fencecheck.workloads.clients import child_section
from fencecheck.workloads.clients.child_section import Child, HostedResource
from fencecheck.workloads.clients.stdio import die_with_parent
from fencecheck.workloads.options import endpoints, op_timeout_s

log = logging.getLogger(__name__)

SESSION_TTL_MS = 15_000  # api.DefaultLockSessionTTL, which `consul lock` does not change
KEY_PREFIX = "fencecheck/"
# `consul lock` retries a refused acquisition after 5 s (api.DefaultLockRetryTime), even past
# its -timeout: room for that, and for its start and the child's (a Python process importing
# the resource: seconds on a loaded machine; at load average 40, 8 s of slack ran out).
ACQUIRE_SLACK_S = 20.0
TIMED_OUT = "timeout during lock acquisition"


# The servers' session_ttl_min (clusters/services/consul.py): a shorter TTL is refused.
MIN_SESSION_TTL_MS = 500


def _ms(options: Mapping[str, Any], key: str, default: int) -> int:
    raw = options.get(key, default)
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise WorkloadError(f"{key}: want a whole number of milliseconds >= 0, not {raw!r}")
    return raw


def api_settings(options: Mapping[str, Any], lease_ms: int) -> None:
    """The Go `api.Lock` client's options (workloads/clients/go/consul/): `session_ttl_ms`
    (default: the lease) at least the lease (Consul keeps a session at least its TTL after a
    renewal) and at least the servers' minimum; `lock_delay_ms` (default: Consul's 15 s) >= 0
    (0 is asked as 1 ms: the api leaves a zero lock-delay out, and Consul then applies 15 s)."""
    ttl = _ms(options, "session_ttl_ms", lease_ms)
    if ttl < max(lease_ms, MIN_SESSION_TTL_MS):
        raise WorkloadError(f"session_ttl_ms: {ttl} ms is shorter than the lease ({lease_ms} "
                            f"ms) or the servers' minimum ({MIN_SESSION_TTL_MS} ms)")
    _ms(options, "lock_delay_ms", 0)


def settings(options: Mapping[str, Any], lease_ms: int) -> None:
    """Refuse a lease `consul lock` does not keep (see the module docstring)."""
    if lease_ms > SESSION_TTL_MS:
        raise WorkloadError(f"lease_ms: consul lock's session TTL is fixed at {SESSION_TTL_MS} "
                            f"ms; a lease of {lease_ms} ms would be longer than Consul keeps")


@dataclass
class Held:
    """Grant.handle: the running `consul lock`, its child, and the (unlinked) file that takes
    their stderr."""

    proc: subprocess.Popen[bytes]
    child: Child
    stderr: IO[bytes]


class ConsulLockClient:
    """See the module docstring."""

    name = "consul-lock"

    def __init__(self, options: Mapping[str, Any]) -> None:
        binary = options.get("consul_binary")
        if not isinstance(binary, str) or not binary:
            raise WorkloadError("consul-lock needs the consul binary (option consul_binary)")
        self.binary = binary
        eps = endpoints(options)
        worker = int(options.get("worker", 0))
        host, port = eps[worker % len(eps)]
        self.http_addr = f"http://{host}:{port}"
        self.worker = worker
        self.op_timeout_s = op_timeout_s(options)
        self.held: dict[str, Held] = {}
        self.resource: dict[str, Any] | None = None
        self.count = 0

    # -- SectionHost

    def host_sections(self, resource: str, options: Mapping[str, Any],
                      direct: Resource) -> Resource:
        self.resource = {"name": resource, "options": dict(options),
                         "held_env": "CONSUL_LOCK_HELD"}
        return HostedResource(direct, self._child_for, self.op_timeout_s + 1.0)

    def _child_for(self, lock: str) -> Child | None:
        held = self.held.get(lock)
        return held.child if held is not None else None

    # -- LockClient

    def acquire(self, lock: str, lease_ms: int, timeout_s: float) -> Grant:
        if self.resource is None:
            raise WorkloadError("consul-lock runs its sections in children: the worker must "
                                "host its resource (SectionHost)")
        stale = self.held.pop(lock, None)  # a grant the worker dropped (an uncertain op)
        if stale is not None:
            self._end(stale)
        self.count += 1
        # An abstract socket (Linux; in the worker's network namespace, which the child
        # shares) and an unlinked file for stderr: nothing on disk to leave behind.
        name = f"fencecheck-consul-lock-{os.getpid()}-{self.count}-{os.urandom(4).hex()}"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stderr = tempfile.TemporaryFile()  # noqa: SIM115 (kept open with the grant: Held)
        try:
            listener.bind("\0" + name)
            listener.listen(1)
            proc = self._start(lock, timeout_s, name, stderr)
            try:
                child = self._wait_child(listener, proc, timeout_s + ACQUIRE_SLACK_S, stderr)
            except BaseException:
                self._stop(proc)
                raise
        except BaseException:
            stderr.close()
            raise
        finally:
            listener.close()
        self.held[lock] = Held(proc, child, stderr)
        return Grant(lock, None, lease_ms, handle=self.held[lock])

    def renew(self, grant: Grant, lease_ms: int) -> Grant:
        raise DefiniteFailure("renews-itself", "consul lock renews its own session")

    def release(self, grant: Grant) -> None:
        held = self.held.pop(grant.lock, None)
        if held is None:
            raise DefiniteFailure("not-held")
        held.child.close()  # the child exits on EOF; consul lock then releases and exits
        try:
            code = held.proc.wait(timeout=3 * self.op_timeout_s + 2.0)
        except subprocess.TimeoutExpired:
            self._end(held)
            raise Indeterminate("release-timeout", "consul lock did not exit") from None
        self._end(held)
        if code != 0:
            raise Indeterminate("release-failed", f"consul lock exited {code}")

    def close(self) -> None:
        for held in self.held.values():
            self._end(held)
        self.held.clear()

    # -- helpers

    def _start(self, lock: str, timeout_s: float, name: str,
               stderr: IO[bytes]) -> subprocess.Popen[bytes]:
        argv = [self.binary, "lock", f"-http-addr={self.http_addr}", f"-timeout={timeout_s}s",
                "-shell=false", f"-name=fencecheck worker {self.worker} grant {self.count}",
                KEY_PREFIX + lock, sys.executable, "-m", child_section.__name__, name]
        env = {**os.environ, child_section.RESOURCE_ENV: json.dumps(self.resource)}
        log.debug("starting %s", argv)
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr,
                                env=env, preexec_fn=die_with_parent)

    def _wait_child(self, listener: socket.socket, proc: subprocess.Popen[bytes], wait_s: float,
                    stderr: IO[bytes]) -> Child:
        """The child's connection once it said hello; the outcomes of the module docstring."""
        deadline = time.monotonic() + wait_s
        listener.settimeout(0.05)
        while True:
            with contextlib.suppress(TimeoutError):
                conn, _ = listener.accept()
                break
            if proc.poll() is not None:
                text = self._said(stderr)
                if TIMED_OUT in text:
                    raise DefiniteFailure("not-acquired")
                raise Indeterminate("consul-lock-exited", f"exit {proc.returncode}: {text}")
            if time.monotonic() > deadline:
                raise Indeterminate("acquire-timeout", f"no child in {wait_s:.1f} s")
        conn.setblocking(True)
        box = Child(conn, {}, b"")
        line = child_section.read_line(conn, box, deadline + 5.0)
        if not line:
            box.close()
            raise Indeterminate("child-gone", "before its hello")
        hello = json.loads(line)
        if not hello.get("held"):
            box.close()
            raise Indeterminate("child-not-held", "CONSUL_LOCK_HELD is not true")
        return Child(conn, hello, box.buffer)

    def _stop(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGTERM (consul lock then kills its child and releases), SIGKILL if it lingers."""
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=8.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    @staticmethod
    def _said(stderr: IO[bytes]) -> str:
        """The end of what consul lock and its child wrote to stderr."""
        with contextlib.suppress(OSError, ValueError):
            stderr.seek(0)
            return stderr.read().decode(errors="replace").strip()[-500:]
        return ""

    def _end(self, held: Held) -> None:
        """Close the child's socket, stop consul lock if it runs, log what it said."""
        held.child.close()
        self._stop(held.proc)
        text = self._said(held.stderr)
        if text:
            log.info("consul lock said: %s", text.replace("\n", " / "))
        held.stderr.close()
