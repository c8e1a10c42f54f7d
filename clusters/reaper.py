"""Processes and network namespaces of a run, found without live objects: a process's start
time (so a reused pid is never killed), killing pids (resumed first), the processes inside a
namespace, deleting namespaces, processes carrying a run's environment marker, and the
namespaces named by our scheme for a run. The cleaner (clusters/cleaner.py) and the runtimes use
these to remove what a run made."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from fencecheck.clusters.base import ClusterError

NETNS_DIR = Path("/run/netns")
ENV_MARKER = "FENCECHECK_RUN"
# fc-<run>-<node> (node namespaces) and fc-<run>-sw (the switch); see clusters/runtimes/netns.py.
NETNS_NAME_RE = re.compile(r"^fc-([0-9a-z]{1,8})-([a-z0-9][a-z0-9-]*)$")


def _start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks since boot), None if gone/zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def _alive(pid: int) -> bool:
    return _start_time(pid) is not None


def kill_pids(pids: list[int], wait_s: float = 5.0) -> None:
    """SIGCONT (a stopped process must run to die cleanly and to release what it holds), then
    SIGKILL, then wait until every pid is gone or a zombie. Raises if one survives."""
    for sig in (signal.SIGCONT, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    deadline = time.monotonic() + wait_s
    left = [p for p in pids if _alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.01)
        left = [p for p in left if _alive(p)]
    # Reap our own children so they do not linger as zombies.
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
    if left:
        raise ClusterError(f"processes survived SIGKILL: {left}")


def netns_pids(names: list[str]) -> dict[str, list[int]]:
    """Pids whose network namespace is /run/netns/NAME, for each name (what `ip netns pids`
    does, in one pass over /proc for all names)."""
    want: dict[tuple[int, int], str] = {}
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            st = os.stat(NETNS_DIR / name)
            want[(st.st_dev, st.st_ino)] = name
    out: dict[str, list[int]] = {name: [] for name in names}
    if not want:
        return out
    me = os.getpid()
    for pid in _proc_pids():
        try:
            ns = os.stat(f"/proc/{pid}/ns/net")
        except OSError:
            continue
        owner = want.get((ns.st_dev, ns.st_ino))
        if owner is not None and pid != me:
            out[owner].append(pid)
    return out


def delete_netns(names: list[str]) -> list[str]:
    """Kill every process in the namespaces (SIGCONT, SIGKILL, wait), then delete them, in
    one `ip -batch`. Returns the names that existed; raises if one is left."""
    present = [n for n in names if (NETNS_DIR / n).exists()]
    if not present:
        return []
    for _ in range(5):  # a dying process may have forked; go round until none are left
        pids = [p for ps in netns_pids(present).values() for p in ps]
        if not pids:
            break
        kill_pids(pids)
    batch = "".join(f"netns del {n}\n" for n in present)
    res = subprocess.run(["ip", "-force", "-batch", "-"], input=batch, capture_output=True,
                         text=True)
    left = [n for n in present if (NETNS_DIR / n).exists()]
    if left:
        raise ClusterError(f"ip netns del {' '.join(left)}: {res.stderr.strip()}")
    return present


def _proc_pids() -> Iterator[int]:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            yield int(entry)


def marked_pids(run_id: str) -> list[int]:
    """Processes whose environment carries FENCECHECK_RUN=<run_id> (never this process or its
    ancestors, which may have the marker if a user exported it)."""
    marker = f"{ENV_MARKER}={run_id}".encode()
    skip = _ancestors()
    out = []
    for pid in _proc_pids():
        if pid in skip:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if marker in env and _alive(pid):
            out.append(pid)
    return out


def _ancestors() -> set[int]:
    out, pid = set(), os.getpid()
    while pid > 1:
        out.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            break
    return out


def run_namespaces(run_id: str) -> list[str]:
    """Existing namespaces named by our scheme for this run."""
    if not NETNS_DIR.exists():
        return []
    out = []
    for name in os.listdir(NETNS_DIR):
        m = NETNS_NAME_RE.match(name)
        if m and m.group(1) == run_id:
            out.append(name)
    return sorted(out)
