"""Per-node wall-clock faults through our LD_PRELOAD shim (`clockshim.c`).

- `build_shim(cache_dir)`: compile the shim with the system cc, cached by source hash.
- `check_clock_supported(backend)`: refuse backends the shim cannot move (etcd).
- `ClockControl`: one offset file per node; `env_for(node)` is what a lock service adds to its
  daemons' environment; `bump`, `strobe`, `reset`, `reset_all` move the clocks.
- `ClockNemesis`: the `Nemesis` over `ClockControl` (`start-clock`/`stop-clock` on a seeded
  schedule, and explicit `bump`, `strobe`, `reset`).

Only processes started with `env_for(node)` see the offset; everything else on the host, the
controller's history clock included, keeps true time.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fencecheck.clusters.base import ClusterError, NemesisOp, Remote
from fencecheck.clusters.runtimes.local import LocalRemote

log = logging.getLogger(__name__)

SHIM_SOURCE = Path(__file__).with_name("clockshim.c")
OFFSET_ENV = "FC_CLOCK_OFFSET_FILE"
# The shim re-reads its offset file at most every 10 ms; a faster strobe would be a lie.
MIN_STROBE_PERIOD_S = 0.02
_CC_FLAGS = ("-shared", "-fPIC", "-O2", "-Wall")

# Backends whose servers read the wall clock without going through libc.
_UNSUPPORTED = {
    "etcd": (
        "the clock nemesis cannot skew etcd: Go binaries read the clock through the vDSO, "
        "which an LD_PRELOAD shim cannot intercept (and etcd expires leases by monotonic time)"
    ),
}


def check_clock_supported(backend: str) -> None:
    """Raise ClusterError with the reason when the shim cannot move `backend`'s clock."""
    reason = _UNSUPPORTED.get(backend.split("-", 1)[0])
    if reason is not None:
        raise ClusterError(reason)


def shim_digest() -> str:
    return hashlib.sha256(SHIM_SOURCE.read_bytes()).hexdigest()[:16]


def build_shim(cache_dir: Path, cc: str = "cc") -> Path:
    """Compile clockshim.c into cache_dir (once per source version) and return the .so path."""
    out = cache_dir / f"clockshim-{shim_digest()}.so"
    if out.exists():
        return out
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    argv = [cc, *_CC_FLAGS, "-o", str(tmp), str(SHIM_SOURCE)]
    log.debug("local: run %s", argv)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ClusterError(f"cannot compile the clock shim with {cc}: {e}") from None
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise ClusterError(f"cannot compile the clock shim: {proc.stderr.strip()[-500:]}")
    os.replace(tmp, out)  # atomic, so concurrent builders never load a half-written file
    return out


def _as_nodes(node: str | Sequence[str]) -> list[str]:
    return [node] if isinstance(node, str) else list(node)


class ClockControl:
    """The wall-clock offsets of nodes, one file each: `<directory>/<node>.offset`.

    Nodes are this host's by default (LocalRemote and netns nodes share its filesystem and its
    compiled shim), so `env_for(node)` can be called for any node name, before the nodes exist.
    Nodes given in `nodes` that are not LocalRemotes get the shim compiled on them by `setup()`
    and their offset file put at the same path. Every change replaces a file atomically."""

    def __init__(
        self,
        directory: Path,
        nodes: Mapping[str, Remote] | None = None,
        cache_dir: Path | None = None,
    ) -> None:
        self.directory = directory
        self.nodes: dict[str, Remote] = dict(nodes or {})
        self.cache_dir = (
            cache_dir
            or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fencecheck"
        )
        self._offsets_ns: dict[str, int] = {}
        self._shim: dict[str, str] = {}  # node -> shim path on that node
        self._lock = threading.RLock()
        self._epoch = 0  # bumped by reset_all, so a running strobe stops writing

    def offset_path(self, node: str) -> str:
        return str(self.directory / f"{node}.offset")

    def setup(self) -> None:
        """Build the shim for every node given (compiling it on remote ones), zero offsets."""
        for node in self.nodes:
            self._ensure(node)

    def _ensure(self, node: str) -> None:
        with self._lock:
            if node in self._shim:
                return
            remote = self.nodes.get(node)
            if remote is None or isinstance(remote, LocalRemote):
                self._shim[node] = str(build_shim(self.cache_dir))
            else:
                self._shim[node] = self._build_on(remote)
            self._write(node, 0)

    def _build_on(self, remote: Remote) -> str:
        # Like Jepsen's clock helpers: compile on the node, for the node's own libc.
        base = f"{self.directory}/{remote.name}-clockshim-{shim_digest()}"
        remote.run(["mkdir", "-p", str(self.directory)])
        if remote.run(["test", "-e", f"{base}.so"], check=False).returncode != 0:
            remote.put_file(SHIM_SOURCE, f"{base}.c")
            remote.run(["cc", *_CC_FLAGS, "-o", f"{base}.so", f"{base}.c"], timeout_s=120)
        return f"{base}.so"

    def env_for(self, node: str) -> dict[str, str]:
        """Environment for a daemon on `node` whose wall clock the nemesis may move."""
        self._ensure(node)
        return {"LD_PRELOAD": self._shim[node], OFFSET_ENV: self.offset_path(node)}

    def known_nodes(self) -> list[str]:
        return list(self._shim)

    def offset_s(self, node: str) -> float:
        return self._offsets_ns.get(node, 0) / 1e9

    def bump(self, node: str | Sequence[str], delta_s: float) -> dict[str, float]:
        """Move the clocks of node(s) by delta_s (relative, may be negative); returns offsets."""
        with self._lock:
            for n in _as_nodes(node):
                self._ensure(n)
                self._write(n, self._offsets_ns.get(n, 0) + round(delta_s * 1e9))
            return {n: self.offset_s(n) for n in _as_nodes(node)}

    def strobe(
        self, node: str | Sequence[str], delta_s: float, period_s: float, duration_s: float
    ) -> int:
        """Flip the clocks of node(s) between their offset and offset+delta_s every period_s for
        duration_s (blocking), then put them back. Stops early on reset_all. Returns flips."""
        if period_s < MIN_STROBE_PERIOD_S:
            raise ClusterError(f"strobe period must be at least {MIN_STROBE_PERIOD_S} s")
        nodes = _as_nodes(node)
        with self._lock:
            for n in nodes:
                self._ensure(n)
            epoch = self._epoch
            base = {n: self._offsets_ns.get(n, 0) for n in nodes}
        delta_ns = round(delta_s * 1e9)
        flips, deadline = 0, time.monotonic() + duration_s
        try:
            while time.monotonic() < deadline:
                with self._lock:
                    if self._epoch != epoch:
                        return flips
                    flips += 1
                    for n in nodes:
                        self._write(n, base[n] + (delta_ns if flips % 2 else 0))
                time.sleep(min(period_s, max(0.0, deadline - time.monotonic())))
        finally:
            with self._lock:
                if self._epoch == epoch:
                    for n in nodes:
                        self._write(n, base[n])
        return flips

    def reset(self, node: str | Sequence[str]) -> None:
        with self._lock:
            for n in _as_nodes(node):
                if n in self._shim:
                    self._write(n, 0)

    def reset_all(self) -> None:
        """Every node back to true time; stops a running strobe. Idempotent; safe on every exit
        path (tries every node, then raises the first error)."""
        with self._lock:
            self._epoch += 1
            errors: list[Exception] = []
            for n in self._shim:
                try:
                    self._write(n, 0)
                except (OSError, ClusterError) as e:
                    errors.append(e)
            if errors:
                raise ClusterError(f"clock reset failed on {len(errors)} node(s): {errors[0]}")

    def _write(self, node: str, offset_ns: int) -> None:
        remote = self.nodes.get(node)
        path = Path(self.offset_path(node))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{threading.get_ident()}.tmp")
        tmp.write_text(f"{offset_ns}\n")
        if remote is None or isinstance(remote, LocalRemote):
            os.replace(tmp, path)
        else:
            remote.put_file(tmp, f"{path}.tmp")
            remote.run(["mv", "-f", f"{path}.tmp", str(path)])
            tmp.unlink(missing_ok=True)
        self._offsets_ns[node] = offset_ns
        log.debug("%s: clock offset %+.3f s", node, offset_ns / 1e9)


class ClockNemesis:
    """Clock faults as nemesis ops.

    The controller's ops: `start-clock` picks, from the seeded rng, one of: a forward bump
    larger than the lease on a majority of `servers` (the Redlock-breaking case, half the
    time), a bump of one node forward or back, or a strobe of a majority (in a background
    thread); `stop-clock` puts every clock back. Explicit ops for scripts and tests: `bump`
    {"nodes", "delta_s"}, `strobe` {"nodes", "delta_s", "period_s", "duration_s"} (blocking),
    `reset` {"nodes"} or null for all. `heal` resets all and stops a strobe."""

    name = "clock"

    def __init__(
        self,
        clock: ClockControl,
        servers: Sequence[str] | None = None,
        *,
        lease_ms: int = 2000,
        rng: random.Random | None = None,
    ) -> None:
        self.clock = clock
        self.servers = list(servers) if servers is not None else clock.known_nodes()
        self.lease_s = lease_ms / 1000.0
        self.rng = rng or random.Random()
        self._strober: threading.Thread | None = None

    def _majority(self) -> list[str]:
        return sorted(self.rng.sample(self.servers, len(self.servers) // 2 + 1))

    def _start(self) -> dict[str, Any]:
        r = self.rng.random()
        # Forward by more than a lease, but not by much more: keys written while a clock is
        # ahead outlive the reset by the same amount and would stall the rest of the run.
        delta = round(self.rng.uniform(1.5, 3.0) * self.lease_s + 1.0, 3)
        if r < 0.5:
            nodes = self._majority()
            return {"kind": "bump", "offset_s": self.clock.bump(nodes, delta)}
        if r < 0.75:
            node = self.rng.choice(self.servers)
            sign = self.rng.choice((1, -1))
            return {"kind": "bump", "offset_s": self.clock.bump(node, sign * delta)}
        nodes = self._majority()
        period = round(self.rng.uniform(0.05, 0.5), 3)
        self._strober = threading.Thread(
            target=self.clock.strobe, args=(nodes, delta, period, 3600.0), daemon=True
        )
        self._strober.start()
        return {"kind": "strobe", "nodes": nodes, "delta_s": delta, "period_s": period}

    def invoke(self, op: NemesisOp) -> Any:
        v: Mapping[str, Any] = op.value if isinstance(op.value, Mapping) else {}
        if op.f == "start-clock":
            return self._start()
        if op.f == "stop-clock":
            self.heal()
            return {"nodes": self.clock.known_nodes()}
        nodes = list(v.get("nodes") or self.servers)
        if op.f == "bump":
            return {"offset_s": self.clock.bump(nodes, float(v["delta_s"]))}
        if op.f == "strobe":
            flips = self.clock.strobe(
                nodes, float(v["delta_s"]), float(v["period_s"]), float(v["duration_s"])
            )
            return {"nodes": nodes, "flips": flips}
        if op.f == "reset":
            if op.value is None:
                self.clock.reset_all()
            else:
                self.clock.reset(nodes)
            return {"nodes": nodes}
        raise ClusterError(f"clock nemesis: unknown op {op.f!r}")

    def heal(self) -> None:
        self.clock.reset_all()  # also stops a running strobe
        if self._strober is not None:
            self._strober.join(timeout=5)
            self._strober = None
