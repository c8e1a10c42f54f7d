"""The delay fault: a held packet that arrives after the lease it was sent under.

`DelayProxies` starts one forwarding proxy per client node (clusters/faults/proxy.py, a child of the
controller inside the client's namespace, recorded in the run's ledger so that `fencecheck
teardown` finds it after a crash) and rewrites the addresses the workers use so that their
traffic to one *path* goes through it: `resource` (the protected resource) or `service` (the
lock service's endpoints). `DelayNemesis` holds the current holder's proxy on `start-delay`
(every byte in both directions is kept, in order) and releases it on `stop-delay` (everything
held is delivered, in order: a release, never a drop). `heal` releases too, on every exit path;
only a proxy stopped while still holding drops its bytes, and its log says how many.

Why the late request lands: the worker must still be waiting for the reply when the hold ends,
so the op timeout on the delayed path is raised above the longest hold (`late_timeout_s`). A
worker that gave up anyway (its socket closed) still has its request delivered late by the
proxy, but its history records `info`, which no check counts as accepted.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from fencecheck.clusters.base import ClientNode, ClusterError, NemesisOp, ProcessHandle
from fencecheck.clusters.services.daemons import ProcessLedger

log = logging.getLogger(__name__)

DelayPath = Literal["resource", "service"]
# Listen ports inside each client namespace (loopback: every client node uses the same ones).
BASE_PORT: dict[DelayPath, int] = {"resource": 17000, "service": 17100}
ACK_TIMEOUT_S = 5.0


def late_timeout_s(op_timeout_s: float, longest_hold_s: float) -> float:
    """The op timeout on a delayed path: longer than any hold, so the late reply is awaited."""
    return max(op_timeout_s, longest_hold_s + 2.0)


@dataclass(slots=True)
class ProxyHandle:
    """One running proxy: its client node, process and acknowledgement file."""

    node: str
    proc: ProcessHandle
    state: Path
    seq: int = 0

    def read_state(self) -> dict[str, Any]:
        try:
            data = json.loads(self.state.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def command(self, sig: signal.Signals) -> dict[str, Any]:
        """Send a control signal and wait for the proxy to acknowledge it in its state file."""
        want = self.seq + 1
        log.debug("%s: proxy pid %d: %s", self.node, self.proc.pid, sig.name)
        self.proc.send_signal(sig)
        deadline = time.monotonic() + ACK_TIMEOUT_S
        while True:
            st = self.read_state()
            if int(st.get("seq", 0)) >= want:
                self.seq = int(st["seq"])
                return st
            if self.proc.poll() is not None:
                raise ClusterError(f"{self.node}: delay proxy exited ({self.proc.returncode})")
            if time.monotonic() > deadline:
                raise ClusterError(f"{self.node}: delay proxy did not acknowledge {sig.name}")
            time.sleep(0.005)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 15.0
        while int(self.read_state().get("seq", 0)) < 1:
            if self.proc.poll() is not None:
                raise ClusterError(f"{self.node}: delay proxy exited ({self.proc.returncode}); "
                                   f"see {self.state.parent / 'proxy.log'}")
            if time.monotonic() > deadline:
                raise ClusterError(f"{self.node}: delay proxy not listening after 15 s")
            time.sleep(0.01)
        self.seq = 1

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class DelayProxies:
    """The proxies of one path on every client node, and the address rewriting that routes the
    workers through them. `stop` is idempotent."""

    def __init__(self, path: DelayPath, targets: Sequence[str]) -> None:
        if not targets:
            raise ClusterError(f"delay: no {path} address to put a proxy in front of")
        self.path = path
        self.targets = list(targets)
        self.local = [f"127.0.0.1:{BASE_PORT[path] + i}" for i in range(len(self.targets))]
        self.handles: dict[str, ProxyHandle] = {}

    def start(self, clients: Mapping[str, ClientNode], run_dir: Path,
              ledger: ProcessLedger | None) -> None:
        routes = [f"--route={a}={t}" for a, t in zip(self.local, self.targets, strict=True)]
        for name, node in clients.items():
            d = run_dir / "nodes" / name
            d.mkdir(parents=True, exist_ok=True)
            state = d / f"proxy-{self.path}.json"
            argv = [sys.executable, "-m", "fencecheck.clusters.faults.proxy", "--state", str(state),
                    *routes]
            with open(d / f"proxy-{self.path}.log", "ab") as out:
                proc = node.spawn(argv, stdout=out, stderr=subprocess.STDOUT,
                                  env=ledger.env() if ledger is not None else None)
            if ledger is not None:
                ledger.record_process(name, f"proxy-{self.path}", proc.pid)
            self.handles[name] = ProxyHandle(name, proc, state)
        for h in self.handles.values():
            h.wait_ready()
        log.info("delay proxies (%s) on %d clients: %s", self.path, len(self.handles),
                 dict(zip(self.local, self.targets, strict=True)))

    def rewrite(self, options: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
        """Options whose addresses of this path point at the local proxy instead."""
        to_local = dict(zip(self.targets, self.local, strict=True))
        out = dict(options)
        if "address" in out:
            out["address"] = to_local.get(str(out["address"]), out["address"])
        if isinstance(out.get("endpoints"), list):
            out["endpoints"] = [to_local.get(str(e), e) for e in out["endpoints"]]
        out["op_timeout_s"] = timeout_s
        return out

    def stop(self) -> None:
        errors: list[str] = []
        for h in self.handles.values():
            try:
                h.stop()
            except Exception as e:  # stop the others; report all at the end
                errors.append(f"{h.node}: {e}")
        if errors:
            raise ClusterError("delay proxies: " + "; ".join(errors))


def path_targets(options: Mapping[str, Any]) -> list[str]:
    """The addresses in a client's or resource's options that a proxy can stand in for."""
    if "address" in options:
        return [str(options["address"])]
    raw = options.get("endpoints")
    return [str(e) for e in raw] if isinstance(raw, list) else []


class DelayNemesis:
    """`start-<name>` with value {"holder": client or null, ...} holds that client's proxy
    (no holder: nothing is held, and the value says so); `stop-<name>` releases every held
    proxy and reports the bytes delivered late."""

    def __init__(self, name: str, proxies: DelayProxies) -> None:
        self.name = name
        self.proxies = proxies
        self.held: dict[str, ProxyHandle] = {}

    def invoke(self, op: NemesisOp) -> Any:
        if op.f == f"start-{self.name}":
            value = op.value if isinstance(op.value, dict) else {}
            holder = value.get("holder")
            targets = [holder] if holder is not None else list(value.get("targets") or [])
            for n in targets:
                h = self.proxies.handles.get(n)
                if h is None:
                    raise ClusterError(f"{self.name}: no proxy on client {n!r}")
                self.held[n] = h  # recorded before the hold: heal must find it
                h.command(signal.SIGUSR1)
            return {"held": targets, "path": self.proxies.path}
        if op.f == f"stop-{self.name}":
            names = sorted(self.held)
            released = self._release()
            return {"released": names, "path": self.proxies.path, "late_bytes": released}
        raise ClusterError(f"{self.name} nemesis: unknown op {op.f!r}")

    def _release(self) -> int:
        errors: list[str] = []
        late = 0
        for n, h in list(self.held.items()):
            before = int(h.read_state().get("released_bytes", 0))
            try:
                st = h.command(signal.SIGUSR2)
            except Exception as e:
                errors.append(f"{n}: {e}")
                continue
            late += int(st.get("released_bytes", 0)) - before
            del self.held[n]
        if errors:
            raise ClusterError("could not release: " + "; ".join(errors))
        return late

    def heal(self) -> None:
        self._release()

