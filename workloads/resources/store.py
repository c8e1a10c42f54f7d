"""The fenced store: a small asyncio TCP server of integer values under string keys, and
`StoreResource`, the worker's client of it ("store" in the registry).

Run: `python -m fencecheck.workloads.resources.store --host H --port P --fencing on|off --log FILE`.

Protocol: one JSON object a line each way. Requests carry an `id` echoed in the reply:
  {"id", "op": "read", "key", "token", "lock"}            -> {"id", "ok": true, "value": int|null}
  {"id", "op": "write", "key", "value", "token", "lock"}  -> {"id", "ok": true}
  {"id", "op": "write", ..., "once": true}  -> {"id", "ok": true, "applied": true|false}
  {"id", "op": "dump"}    -> {"id", "ok": true, "values": {...}, "fences": {...}}
  {"id", "op": "ping"}    -> {"id", "ok": true}
  refusals: {"id", "ok": false, "error": "stale-token" | "bad-request", "detail", "fence"?}
A missing key reads as null; a write sets it. For the cron workload (workloads/loops/cron.py): a
write
with `"once": true` is applied only if the key holds no value yet (a job's effect at most once,
deduplicated by its key `job:<n>`) and the reply says whether it was; the key `jobs:last` reads
as the highest n of a key `job:<n>` that holds a value (null if none), the runners' record.

Fencing on: per key, the highest token seen on *any* request (reads included) is the fence; a
request with a lower token is refused with `stale-token`, an equal or higher one raises the
fence. A null token: a read is allowed and leaves the fence alone (the controller's final
observer read has no token); a write is refused with `stale-token` (a fenced store must not take
an unfenced write). Fencing off: everything is accepted. Every request is logged as one JSON line
(`mono_ns` = CLOCK_MONOTONIC, shared with the controller across namespaces), written
before the reply goes out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import logging
import signal
import socket
import sys
import time
from collections.abc import Mapping
from typing import IO, Any

import msgspec

from fencecheck.workloads import options as opts
from fencecheck.workloads.base import DefiniteFailure, Indeterminate, StaleToken
from fencecheck.workloads.eventlog import encode_line

log = logging.getLogger(__name__)


JOB_PREFIX = "job:"
LAST_JOB_KEY = "jobs:last"


class StoreState:
    """The store's data and fences; `handle` is the whole semantics, free of I/O."""

    def __init__(self, fencing: bool) -> None:
        self.fencing = fencing
        self.values: dict[str, int] = {}
        self.fences: dict[str, int] = {}
        self.last_job: int | None = None

    def handle(self, req: Mapping[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        if op == "ping":
            return {"ok": True}
        if op == "dump":
            return {"ok": True, "values": dict(self.values), "fences": dict(self.fences)}
        if op not in ("read", "write"):
            return _bad(f"unknown op {op!r}")
        key, token = req.get("key"), req.get("token")
        if not isinstance(key, str):
            return _bad("key must be a string")
        if token is not None and (not isinstance(token, int) or isinstance(token, bool)):
            return _bad("token must be an integer or null")
        value = req.get("value")
        if op == "write" and (not isinstance(value, int) or isinstance(value, bool)):
            return _bad("value must be an integer")
        if self.fencing:
            refusal = self._fence(key, token, op)
            if refusal is not None:
                return refusal
        if op == "read":
            if key == LAST_JOB_KEY:
                return {"ok": True, "value": self.last_job}
            return {"ok": True, "value": self.values.get(key)}
        assert isinstance(value, int)
        once = req.get("once") is True
        if once and key in self.values:
            return {"ok": True, "applied": False}
        self.values[key] = value
        job = key.removeprefix(JOB_PREFIX)
        if key.startswith(JOB_PREFIX) and job.isdigit():
            self.last_job = max(int(job), self.last_job if self.last_job is not None else -1)
        return {"ok": True, "applied": True} if once else {"ok": True}

    def _fence(self, key: str, token: int | None, op: str) -> dict[str, Any] | None:
        fence = self.fences.get(key)
        if token is None:
            if op == "read":
                return None
            return {"ok": False, "error": "stale-token", "detail": "write without a token",
                    "fence": fence}
        if fence is not None and token < fence:
            return {"ok": False, "error": "stale-token",
                    "detail": f"token {token} < fence {fence}", "fence": fence}
        self.fences[key] = token
        return None


def _bad(detail: str) -> dict[str, Any]:
    return {"ok": False, "error": "bad-request", "detail": detail}


class StoreServer:
    """Serves a StoreState over TCP; each request is handled whole before the next (one event
    loop, no awaits inside `handle`), so requests are atomic and totally ordered. `log_file`:
    unbuffered binary, so each request's line is one write, on disk before its reply is sent.

    Connections are asyncio Protocols rather than streams: the harness's every critical section
    goes through here twice, and a stream's readline/drain coroutines cost more than the
    request itself (benchmarks/bench_harness_rate.py)."""

    def __init__(self, state: StoreState, log_file: IO[bytes]) -> None:
        self.state = state
        self.log_file = log_file

    async def serve(self, host: str, port: int, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Connection(self), host, port)
        bound = server.sockets[0].getsockname()
        self._log({"event": "listening", "host": bound[0], "port": bound[1],
                   "fencing": self.state.fencing})
        async with server:
            await stop.wait()
        self._log({"event": "stopped"})

    def _log(self, entry: dict[str, Any]) -> None:
        self.log_file.write(encode_line({"mono_ns": time.monotonic_ns(), **entry}))

    def answer(self, line: bytes, peer: str) -> bytes:
        """The reply line to one request line (logged first)."""
        try:
            req = _DECODER.decode(line)
            if not isinstance(req, dict):
                raise ValueError("not an object")
        except ValueError as e:
            req, resp = {"raw": line.decode(errors="replace")}, _bad(str(e))
            resp["id"] = None
            self._log({"peer": peer, "req": req, "resp": resp})
            return encode_line(resp)
        resp = self.state.handle(req)
        resp["id"] = req.get("id")
        reply = encode_line(resp)
        # The line {"mono_ns", "peer", "req", "resp"} spliced from the request as received (it
        # just parsed as a JSON object) and the reply as sent, rather than both encoded again:
        # this runs twice in every lock cycle of the harness.
        self.log_file.write(b'{"mono_ns":%d,"peer":%s,"req":%s,"resp":%s' % (
            time.monotonic_ns(), _json_str(peer), line.strip(), reply[:-1]) + b"}\n")
        return reply


_DECODER = msgspec.json.Decoder()
_json_str = msgspec.json.Encoder().encode
_LINE_LIMIT = 2**16  # a longer line closes the connection (asyncio streams' default limit)


class _Connection(asyncio.Protocol):
    """One client's connection: newline-framed requests, answered in order."""

    def __init__(self, server: StoreServer) -> None:
        self.server = server
        self.buf = b""
        self.peer = "?"
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.buf += data
        replies = []
        while (end := self.buf.find(b"\n")) >= 0:
            line, self.buf = self.buf[:end], self.buf[end + 1:]
            replies.append(self.server.answer(line, self.peer))
        if replies:
            self.transport.write(b"".join(replies))
        if len(self.buf) > _LINE_LIMIT:
            log.debug("client %s: request line over %d bytes", self.peer, _LINE_LIMIT)
            self.transport.close()

    def eof_received(self) -> bool | None:
        if self.buf.strip() and self.transport is not None:  # a last line without its newline
            self.transport.write(self.server.answer(self.buf, self.peer))
        self.buf = b""
        return None  # close


class StoreResource:
    """The worker's client of the store: one persistent connection to `options["address"]`
    (or endpoints[0]), opened lazily, dropped after any failure mid-request."""

    name = "store"

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.host, self.port = opts.address(options)
        self.timeout_s = opts.op_timeout_s(options)
        self._sock: socket.socket | None = None
        self._buf = b""
        self._ids = itertools.count(1)

    def _connect(self) -> socket.socket:
        if self._sock is not None:
            return self._sock
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
        except ConnectionRefusedError as e:
            raise DefiniteFailure("connection-refused", str(e)) from e
        except TimeoutError as e:
            raise DefiniteFailure("connect-timeout", str(e)) from e
        except OSError as e:
            raise DefiniteFailure("connect-failed", str(e)) from e
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock, self._buf = sock, b""
        return sock

    def request(self, req: dict[str, Any]) -> dict[str, Any]:
        """Send one request, wait for its reply. Nothing is retried."""
        sock = self._connect()
        req_id = next(self._ids)
        deadline = time.monotonic() + self.timeout_s
        try:
            sock.settimeout(self.timeout_s)
            sock.sendall(encode_line({"id": req_id, **req}))
            while b"\n" not in self._buf:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("no reply in time")
                sock.settimeout(remaining)
                chunk = sock.recv(65536)
                if not chunk:
                    raise ConnectionError("store closed the connection")
                self._buf += chunk
        except TimeoutError as e:
            self._drop()
            raise Indeterminate("timeout", str(e)) from e
        except OSError as e:
            self._drop()
            raise Indeterminate("connection-lost", str(e)) from e
        line, _, self._buf = self._buf.partition(b"\n")
        try:
            resp = _DECODER.decode(line)
        except ValueError as e:
            self._drop()
            raise Indeterminate("bad-reply", str(e)) from e
        if not isinstance(resp, dict) or resp.get("id") != req_id:
            self._drop()
            raise Indeterminate("bad-reply", f"unexpected reply {line[:200]!r}")
        return resp

    def _check(self, resp: dict[str, Any]) -> None:
        if resp.get("ok") is True:
            return
        error, detail = str(resp.get("error")), str(resp.get("detail", ""))
        if error == "stale-token":
            raise StaleToken(detail)
        raise DefiniteFailure(error, detail)

    def read(self, key: str, token: int | None, lock: str) -> int | None:
        resp = self.request({"op": "read", "key": key, "token": token, "lock": lock})
        self._check(resp)
        value = resp.get("value")
        if value is not None and not isinstance(value, int):
            raise Indeterminate("bad-reply", f"non-integer value {value!r}")
        return value

    def write(self, key: str, value: int, token: int | None, lock: str) -> None:
        resp = self.request(
            {"op": "write", "key": key, "value": value, "token": token, "lock": lock}
        )
        self._check(resp)

    def write_once(self, key: str, value: int, token: int | None, lock: str) -> bool:
        """Write only if `key` holds no value yet; True if this write was applied."""
        resp = self.request(
            {"op": "write", "key": key, "value": value, "token": token, "lock": lock,
             "once": True}
        )
        self._check(resp)
        applied = resp.get("applied")
        if not isinstance(applied, bool):
            raise Indeterminate("bad-reply", f"no applied flag in {resp!r}")
        return applied

    def dump(self) -> dict[str, Any]:
        """Values and fences of the whole store (for tests and the controller's debugging)."""
        resp = self.request({"op": "dump"})
        self._check(resp)
        return resp

    def _drop(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock, self._buf = None, b""

    def close(self) -> None:
        self._drop()


async def _amain(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    with open(args.log, "ab", buffering=0) as log_file:
        server = StoreServer(StoreState(args.fencing == "on"), log_file)
        await server.serve(args.host, args.port, stop)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fencecheck.workloads.resources.store",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--fencing", choices=("on", "off"), required=True)
    parser.add_argument("--log", required=True, help="JSONL file, one line per request")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(_amain(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
