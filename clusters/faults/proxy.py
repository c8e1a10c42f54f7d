"""The delay proxy: a small asyncio TCP forwarder that runs on one client node, between that
node's worker and a server (the resource, or the lock service), and can *hold* the traffic.

Run: `python -m fencecheck.clusters.faults.proxy --state FILE --route LISTEN=TARGET ...` where
LISTEN and TARGET are host:port (LISTEN is usually 127.0.0.1:<port> inside the client's namespace,
so every client node can use the same address).

Control is by signal, so that it works from the controller into any namespace without a
control socket: SIGUSR1 holds, SIGUSR2 releases, SIGTERM stops (whatever is still held is
dropped, and the count logged). After each control signal the proxy rewrites FILE atomically
with `{"seq", "held", "buffered_bytes", "released_bytes", "dropped_bytes"}`, so the controller
can wait for the acknowledgement (`seq` counts the control signals handled).

While held, bytes are read from both sides as soon as they arrive (so a peer that gives up and
closes its socket cannot make the kernel discard them) and kept in order; release writes them
out in order, then forwarding goes on. A side that closes while held has its end-of-stream
delivered after its bytes: a worker that times out and hangs up still has its request land
late at the server, which is the point of the fault. Connections accepted while held connect
upstream at once; only their data waits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from collections import deque
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

_CHUNK = 65536


class Gate:
    """Whether traffic flows, and the byte counts the state file reports."""

    def __init__(self, state: Path | None, pending: Callable[[], int] = lambda: 0) -> None:
        self.state = state
        self.pending = pending  # bytes read and not yet written, over every connection
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.seq = 0
        self.released = 0  # bytes written out by releases, in total
        self.dropped = 0  # bytes whose receiver was gone, or still held at the stop

    @property
    def held(self) -> bool:
        return not self.flowing.is_set()

    def hold(self) -> None:
        self.flowing.clear()
        self._ack()

    def release(self) -> None:
        self.released += self.pending()
        self.flowing.set()
        self._ack()

    def _ack(self) -> None:
        self.seq += 1
        buffered = self.pending()
        log.info("%s (seq %d): %d bytes buffered, %d released in total",
                 "hold" if self.held else "flow", self.seq, buffered, self.released)
        if self.state is None:
            return
        tmp = self.state.with_name(self.state.name + ".tmp")
        tmp.write_text(json.dumps({"seq": self.seq, "held": self.held,
                                   "buffered_bytes": buffered,
                                   "released_bytes": self.released,
                                   "dropped_bytes": self.dropped}))
        os.replace(tmp, self.state)


class _Pipe:
    """One direction of one connection: a reader that never waits for the gate, and a writer
    that writes only while the gate is open."""

    def __init__(self, gate: Gate, src: asyncio.StreamReader,
                 dst: asyncio.StreamWriter) -> None:
        self.gate = gate
        self.src, self.dst = src, dst
        self.chunks: deque[bytes] = deque()
        self.eof = False
        self.wake = asyncio.Event()

    async def read(self) -> None:
        try:
            while data := await self.src.read(_CHUNK):
                self.chunks.append(data)
                self.wake.set()
        except (ConnectionError, OSError) as e:
            log.debug("read side closed: %s", e)
        self.eof = True
        self.wake.set()

    async def write(self) -> None:
        try:
            while True:
                await self.wake.wait()
                self.wake.clear()
                await self.gate.flowing.wait()
                while self.chunks:
                    self.dst.write(self.chunks.popleft())
                await self.dst.drain()
                if self.eof and not self.chunks:
                    if self.dst.can_write_eof():
                        self.dst.write_eof()
                    return
        except (ConnectionError, OSError) as e:
            # The other side is gone: what is left for it cannot be delivered.
            self.gate.dropped += self.pending()
            self.chunks.clear()
            log.debug("write side closed: %s", e)

    def pending(self) -> int:
        return sum(len(c) for c in self.chunks)


class Proxy:
    """Forwards every accepted connection on a route to its target through the gate."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate
        self.pipes: set[_Pipe] = set()
        gate.pending = self.pending

    async def serve(self, listen: tuple[str, int], target: tuple[str, int]) -> asyncio.Server:
        async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._forward(reader, writer, target)

        return await asyncio.start_server(on_client, listen[0], listen[1], reuse_address=True)

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       target: tuple[str, int]) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*target)
        except OSError as e:
            # Refuse the client the way the server would have: close at once.
            log.info("connect to %s:%d failed: %s", target[0], target[1], e)
            writer.close()
            return
        pipes = (_Pipe(self.gate, reader, up_writer), _Pipe(self.gate, up_reader, writer))
        self.pipes.update(pipes)
        try:
            await asyncio.gather(*(p.read() for p in pipes), *(p.write() for p in pipes))
        finally:
            self.pipes.difference_update(pipes)
            for w in (writer, up_writer):
                w.close()

    def pending(self) -> int:
        return sum(p.pending() for p in self.pipes)


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"bad address {text!r}: expected host:port")
    return host.strip("[]"), int(port)


def _route(text: str) -> tuple[tuple[str, int], tuple[str, int]]:
    listen, sep, target = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"bad route {text!r}: expected LISTEN=TARGET")
    return _address(listen), _address(target)


async def _amain(args: argparse.Namespace) -> None:
    gate = Gate(args.state)
    proxy = Proxy(gate)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, gate.hold)
    loop.add_signal_handler(signal.SIGUSR2, gate.release)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    servers = [await proxy.serve(listen, target) for listen, target in args.route]
    for (listen, target) in args.route:
        log.info("forwarding %s:%d -> %s:%d", *listen, *target)
    gate._ack()  # seq 1: listening
    await stop.wait()
    for s in servers:
        s.close()
    gate.dropped += proxy.pending()
    proxy.pipes.clear()
    log.info("stopped: %d bytes dropped (held or undeliverable)", gate.dropped)
    with contextlib.suppress(OSError):
        gate._ack()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fencecheck.clusters.faults.proxy",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state", type=Path, required=True, help="JSON state file (acks)")
    parser.add_argument("--route", type=_route, action="append", required=True,
                        help="LISTEN=TARGET, both host:port (repeatable)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(_amain(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
