"""A critical section run as a child process of a lock tool (`consul lock CMD` runs CMD while it
holds the lock and kills it when it sees the lock lost): the child, and the worker's end of it.

The worker keeps the history; the child does the work. Under a grant of such a client, each of
the worker's reads and writes is sent to the grant's child over a Unix socket and carried out by
the child on its own `Resource` (built from the run's resource name and options). So a write
lands only while the child lives, and whatever the tool lets its child do is what the resource
sees: a child left running after the lock passed to another holder keeps writing, and a child
killed in time writes nothing more.

The child (`python -m fencecheck.workloads.clients.child_section NAME`, with
$FENCECHECK_CHILD_RESOURCE = {"name", "options", "held_env"}: the resource, and the variable the
tool sets in a child that holds the lock, e.g. consul lock's CONSUL_LOCK_HELD=true) connects to
the abstract Unix socket NAME (Linux; no file, so nothing is left behind), says
{"pid", "held"} ("held": that variable is "true"), then answers one request a line
({"op": "read"|"write", "key", "value", "token", "lock"} -> {"ok": true, "value"} or
{"ok": false, "error", "definite"}) until the socket closes, and exits.

Outcomes at the worker: a request the child surely never read (the socket was already closed,
or was reset with the request unread) is `DefiniteFailure("child-gone")`; a request sent to a
child that then vanished or did not answer in time is `Indeterminate` (it may have written);
the child's own refusals keep their kind (a fence's `stale-token`).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from fencecheck.workloads.base import DefiniteFailure, Indeterminate, Resource, StaleToken

RESOURCE_ENV = "FENCECHECK_CHILD_RESOURCE"


class Child:
    """The worker's end of one child's socket (accepted by the worker's listener)."""

    def __init__(self, conn: socket.socket, hello: Mapping[str, Any], buffer: bytes) -> None:
        self.conn = conn
        self.pid = int(hello.get("pid") or 0)
        self.held = bool(hello.get("held"))
        self.buffer = buffer

    def call(self, request: Mapping[str, Any], timeout_s: float) -> Any:
        """One request; the reply's value. See the module docstring for the outcomes."""
        try:
            self.conn.sendall(json.dumps(request).encode() + b"\n")
        except OSError as e:  # EPIPE/ECONNRESET: the child's end was closed before we sent
            raise DefiniteFailure("child-gone", str(e)) from None
        try:
            line = read_line(self.conn, self, time.monotonic() + timeout_s)
        except ConnectionResetError:
            # Linux resets a Unix stream socket's peer only when it closes with data unread in
            # its receive queue: our request, which the child therefore never read. (A child
            # that read it and died answers with an end of file instead: uncertain, below.)
            raise DefiniteFailure("child-gone", "it never read the request") from None
        except OSError as e:
            raise Indeterminate("child-gone", f"mid-request: {e}") from None
        if line is None:
            raise Indeterminate("child-timeout", f"no reply in {timeout_s:.1f} s")
        if line == b"":
            raise Indeterminate("child-gone", "mid-request")
        reply = json.loads(line)
        if reply.get("ok"):
            return reply.get("value")
        error = str(reply.get("error") or "refused")
        if error == "stale-token":
            raise StaleToken(str(reply.get("detail", "")))
        if reply.get("definite"):
            raise DefiniteFailure(error, str(reply.get("detail", "")))
        raise Indeterminate(error, str(reply.get("detail", "")))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.close()


def read_line(conn: socket.socket, holder: Child | Any, deadline: float) -> bytes | None:
    """The next line from conn (buffered in `holder.buffer`): None at the deadline, b"" once the
    other end closed. A process resumed from a pause finds a reply already waiting: one last
    look after the deadline passed."""
    while b"\n" not in holder.buffer:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([conn], [], [], max(left, 0.0))
        if not ready:
            if left <= 0:
                return None
            continue
        chunk = conn.recv(65536)
        if not chunk:
            return b""
        holder.buffer += chunk
    line, _, holder.buffer = holder.buffer.partition(b"\n")
    return line


class HostedResource:
    """The worker's Resource when its client runs sections in children: a request under a lock
    whose child `child_for(lock)` names goes to that child, anything else (no grant: the final
    observer read) to `direct`."""

    def __init__(self, direct: Resource, child_for: Callable[[str], Child | None],
                 timeout_s: float) -> None:
        self.direct = direct
        self.child_for = child_for
        self.timeout_s = timeout_s
        self.name = getattr(direct, "name", "resource")

    def read(self, key: str, token: int | None, lock: str) -> int | None:
        child = self.child_for(lock)
        if child is None:
            return self.direct.read(key, token, lock)
        value = child.call({"op": "read", "key": key, "token": token, "lock": lock},
                           self.timeout_s)
        return None if value is None else int(value)

    def write(self, key: str, value: int, token: int | None, lock: str) -> None:
        child = self.child_for(lock)
        if child is None:
            self.direct.write(key, value, token, lock)
            return
        child.call({"op": "write", "key": key, "value": value, "token": token, "lock": lock},
                   self.timeout_s)

    def close(self) -> None:
        self.direct.close()


# --- the child ----------------------------------------------------------------------------------


def _serve(resource: Resource, request: Mapping[str, Any]) -> dict[str, Any]:
    key, token, lock = str(request["key"]), request.get("token"), str(request.get("lock") or "")
    try:
        if request.get("op") == "read":
            return {"ok": True, "value": resource.read(key, token, lock)}
        resource.write(key, int(request["value"]), token, lock)
        return {"ok": True}
    except DefiniteFailure as e:
        return {"ok": False, "error": e.error, "detail": str(e), "definite": True}
    except Indeterminate as e:
        return {"ok": False, "error": e.error, "detail": str(e), "definite": False}
    except Exception as e:  # uncertain: the write may have reached the resource
        return {"ok": False, "error": type(e).__name__, "detail": str(e), "definite": False}


def main(argv: list[str]) -> int:
    from fencecheck.workloads.registry import make_resource

    if len(argv) != 1 or RESOURCE_ENV not in os.environ:
        print(f"usage: {RESOURCE_ENV}=... python -m {__spec__.name if __spec__ else __name__} "
              "NAME", file=sys.stderr)
        return 3
    spec = json.loads(os.environ[RESOURCE_ENV])
    resource = make_resource(spec["name"], spec["options"])
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect("\0" + argv[0])  # an abstract socket: the name, with no file
    held = os.environ.get(str(spec.get("held_env") or ""), "") == "true"
    conn.sendall(json.dumps({"pid": os.getpid(), "held": held}).encode() + b"\n")
    with conn.makefile("rb") as lines:
        for line in lines:
            reply = _serve(resource, json.loads(line))
            conn.sendall(json.dumps(reply).encode() + b"\n")
    resource.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
