"""The delay proxy (clusters/faults/proxy.py) against a real TCP server: traffic flows, a hold keeps
every byte (in order, both ways) until the release, a request whose sender hung up still lands
late, and a stop while holding drops and says so. The proxy runs as its own process, controlled
by signals and acknowledged through its state file, exactly as a run drives it."""

from __future__ import annotations

import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fencecheck.clusters.base import NemesisOp
from fencecheck.clusters.faults.delay import DelayNemesis, DelayProxies, ProxyHandle


class _Recorder(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Echo)
        self.lines: list[tuple[float, bytes]] = []


class _Echo(socketserver.StreamRequestHandler):
    """Records every line with its arrival time and answers "ok <line>"."""

    server: _Recorder

    def handle(self) -> None:
        for line in self.rfile:
            self.server.lines.append((time.monotonic(), line.strip()))
            self.wfile.write(b"ok " + line)


@pytest.fixture
def server() -> Iterator[_Recorder]:
    srv = _Recorder()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def proxy(tmp_path: Path, server: _Recorder) -> Iterator[tuple[ProxyHandle, int]]:
    port = _free_port()
    target = f"127.0.0.1:{server.server_address[1]}"
    state = tmp_path / "proxy.json"
    proc = subprocess.Popen([sys.executable, "-m", "fencecheck.clusters.faults.proxy", "--state",
                             str(state), f"--route=127.0.0.1:{port}={target}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    handle = ProxyHandle("c1", proc, state)
    try:
        handle.wait_ready()
        yield handle, port
    finally:
        handle.stop()


def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.settimeout(5)
    return s


def _recv_lines(s: socket.socket, n: int) -> list[bytes]:
    buf = b""
    while buf.count(b"\n") < n:
        chunk = s.recv(4096)
        if not chunk:
            break
        buf += chunk
    return buf.splitlines()


def test_traffic_flows_through_when_not_held(proxy: tuple[ProxyHandle, int],
                                             server: _Recorder) -> None:
    _, port = proxy
    with _connect(port) as s:
        s.sendall(b"w1\n")
        assert _recv_lines(s, 1) == [b"ok w1"]
    assert [line for _, line in server.lines] == [b"w1"]


def test_a_hold_keeps_requests_until_the_release_then_delivers_them_in_order(
        proxy: tuple[ProxyHandle, int], server: _Recorder) -> None:
    handle, port = proxy
    with _connect(port) as s:
        s.sendall(b"before\n")
        assert _recv_lines(s, 1) == [b"ok before"]
        assert handle.command(signal.SIGUSR1)["held"] is True
        s.sendall(b"w1\n")
        s.sendall(b"w2\n")
        s.sendall(b"w3\n")
        time.sleep(1.0)
        assert [line for _, line in server.lines] == [b"before"], "a held request arrived"
        s.settimeout(0.2)
        with pytest.raises(TimeoutError):
            s.recv(100)
        released_at = time.monotonic()
        st = handle.command(signal.SIGUSR2)
        assert st["held"] is False and st["released_bytes"] == 9
        s.settimeout(5)
        assert _recv_lines(s, 3) == [b"ok w1", b"ok w2", b"ok w3"]
    late = server.lines[1:]
    assert [line for _, line in late] == [b"w1", b"w2", b"w3"]
    assert all(t >= released_at - 0.05 for t, _ in late)


def test_replies_are_held_too(proxy: tuple[ProxyHandle, int], server: _Recorder) -> None:
    handle, port = proxy
    with _connect(port) as s:
        s.sendall(b"ping\n")
        assert _recv_lines(s, 1) == [b"ok ping"]
        handle.command(signal.SIGUSR1)
        s.sendall(b"x\n")
        handle.command(signal.SIGUSR2)  # the request goes out, its reply flows back
        assert _recv_lines(s, 1) == [b"ok x"]
        handle.command(signal.SIGUSR1)
        # A reply on its way back while held: send through a second connection that is
        # opened while held, so both directions are exercised under one hold.
        with _connect(port) as s2:
            s2.sendall(b"y\n")
            time.sleep(0.5)
            assert b"y" not in [line for _, line in server.lines]
            handle.command(signal.SIGUSR2)
            assert _recv_lines(s2, 1) == [b"ok y"]


def test_a_request_whose_sender_gave_up_still_lands_after_the_release(
        proxy: tuple[ProxyHandle, int], server: _Recorder) -> None:
    handle, port = proxy
    handle.command(signal.SIGUSR1)
    with _connect(port) as s:
        s.sendall(b"late-write\n")
        time.sleep(0.3)
    # the sender is gone (timed out and closed its socket)
    time.sleep(0.3)
    assert server.lines == []
    handle.command(signal.SIGUSR2)
    deadline = time.monotonic() + 5
    while not server.lines and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [line for _, line in server.lines] == [b"late-write"]


def test_stopping_while_held_drops_and_reports_it(proxy: tuple[ProxyHandle, int],
                                                  server: _Recorder) -> None:
    handle, port = proxy
    handle.command(signal.SIGUSR1)
    with _connect(port) as s:
        s.sendall(b"never\n")
        time.sleep(0.3)
        handle.stop()
    assert handle.proc.returncode == 0
    assert handle.read_state()["dropped_bytes"] == 6
    assert server.lines == []


def test_the_nemesis_holds_the_holder_only_and_heal_releases(
        proxy: tuple[ProxyHandle, int], server: _Recorder) -> None:
    handle, port = proxy
    proxies = DelayProxies("resource", ["127.0.0.1:1"])
    proxies.handles = {"c1": handle}
    nem = DelayNemesis("delay", proxies)
    out = nem.invoke(NemesisOp("start-delay", {"holder": "c1", "clients": ["c1", "c2"]}))
    assert out == {"held": ["c1"], "path": "resource"}
    with _connect(port) as s:
        s.sendall(b"w\n")
        time.sleep(0.3)
        assert server.lines == []
        nem.heal()
        nem.heal()  # idempotent
        assert _recv_lines(s, 1) == [b"ok w"]
    assert nem.invoke(NemesisOp("stop-delay")) == {"released": [], "path": "resource",
                                                   "late_bytes": 0}
