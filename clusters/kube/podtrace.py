"""What one pod of the one-node cluster holds on the node, taken while it runs (`PodTrace`), and
which of it is still there later (`PodTrace.left`): its processes (its cgroup's, with their start
times), every network namespace they are in or have mounted (the sandbox's, and those fencecheck
makes inside the pod: found through /proc/PID/root/run/netns), the sandbox's veth on the node's
bridge, its cgroups, its mounts on the host, and the node's iptables lines naming its sandbox.
A namespace is still there while any process is in it, has it open or has it mounted, in any
mount namespace: all three are looked for. For the must-show that a killed shard's pod leaves
nothing behind (benchmarks/bench_k8s_job.py)."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from fencecheck.clusters.kube.files import Layout
from fencecheck.clusters.kube.sweep import cgroup_dirs
from fencecheck.clusters.reaper import NETNS_DIR, _start_time

_NS = re.compile(r"net:\[(\d+)\]")


def _ns_of(path: str) -> int | None:
    with contextlib.suppress(OSError):
        m = _NS.fullmatch(os.readlink(path))
        return int(m.group(1)) if m else None
    return None


def pod_cgroups(layout: Layout, uid: str) -> list[Path]:
    """The pod's cgroup folders (kubelet's cgroupfs naming: .../pod<uid>), every hierarchy."""
    out: list[Path] = []
    for top in cgroup_dirs(layout.cgroup_root):
        out += [p for p in top.rglob(f"pod{uid}") if p.is_dir()]
    return sorted(out)


def _pids(cgroups: list[Path]) -> set[int]:
    pids: set[int] = set()
    for cg in cgroups:
        for procs in cg.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                pids |= {int(p) for p in procs.read_text().split()}
    return pids


def _node(layout: Layout, *argv: str) -> str:
    res = subprocess.run(["nsenter", f"--net={NETNS_DIR / layout.netns}", *argv],
                         capture_output=True, text=True, timeout=60)
    return res.stdout


def live_netns() -> set[int]:
    """Every network namespace on the machine that something holds: a process in it, an open
    file of it, or a mount of it (nsfs) in any mount namespace."""
    out: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        ns = _ns_of(f"/proc/{entry}/ns/net")
        if ns is not None:
            out.add(ns)
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{entry}/fd"):
                ns = _ns_of(f"/proc/{entry}/fd/{fd}")
                if ns is not None:
                    out.add(ns)
        with contextlib.suppress(OSError), open(f"/proc/{entry}/mountinfo") as f:
            for line in f:
                fields = line.split()
                m = _NS.fullmatch(fields[3]) if len(fields) > 3 else None
                if m:
                    out.add(int(m.group(1)))
    return out


@dataclass
class PodTrace:
    """What a pod (uid, sandbox id) holds on the node, as taken by `take`."""

    uid: str
    sandbox: str
    pids: dict[int, int] = field(default_factory=dict)  # pid -> start time
    netns: set[int] = field(default_factory=set)
    veth: str | None = None
    cgroups: list[Path] = field(default_factory=list)

    @classmethod
    def take(cls, layout: Layout, uid: str, sandbox: str) -> PodTrace:
        t = cls(uid, sandbox, cgroups=pod_cgroups(layout, uid))
        for pid in _pids(t.cgroups):
            start = _start_time(pid)
            if start is None:
                continue
            t.pids[pid] = start
            ns = _ns_of(f"/proc/{pid}/ns/net")
            if ns is not None:
                t.netns.add(ns)
            root = Path(f"/proc/{pid}/root/run/netns")
            with contextlib.suppress(OSError):
                for name in os.listdir(root):
                    with contextlib.suppress(OSError):
                        t.netns.add(os.stat(root / name).st_ino)
        t.veth = t._veth(layout)
        return t

    def _veth(self, layout: Layout) -> str | None:
        """The node's end of the sandbox's eth0 (its peer's index, found in the sandbox)."""
        for pid in self.pids:
            res = subprocess.run(["nsenter", "-t", str(pid), "-n", "ip", "-o", "link", "show",
                                  "eth0"], capture_output=True, text=True)
            m = re.search(r"eth0@if(\d+)", res.stdout)
            if m:
                for line in _node(layout, "ip", "-o", "link", "show").splitlines():
                    if line.startswith(f"{m.group(1)}: "):
                        return line.split(": ")[1].split("@")[0]
        return None

    def left(self, layout: Layout) -> list[str]:
        """What of this pod is still on the node (empty: nothing)."""
        out = [f"process {p}" for p, start in self.pids.items() if _start_time(p) == start]
        live = live_netns()
        out += [f"network namespace net:[{ns}]" for ns in sorted(self.netns & live)]
        if self.veth and self.veth in _node(layout, "ip", "-o", "link", "show"):
            out.append(f"veth {self.veth}")
        out += [f"cgroup {cg}" for cg in self.cgroups if cg.exists()]
        with open("/proc/self/mountinfo") as f:
            out += [f"mount {line.split()[4]}" for line in f
                    if self.uid in line or self.sandbox in line]
        for tool in ("iptables-save", "ip6tables-save"):
            host = subprocess.run([tool], capture_output=True, text=True).stdout
            for where, text in (("node", _node(layout, tool)), ("host", host)):
                out += [f"{tool} ({where}): {line}" for line in text.splitlines()
                        if self.sandbox in line]
        return out
