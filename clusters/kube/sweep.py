"""What a one-node cluster leaves on the host besides its recorded processes and its network
namespace, found by its recorded names and removed (`sweep`), or listed (`leftovers`), with no
live object: the processes of its containers (in its cgroup root) and their containerd shims
(started with its socket's address), the mounts under its folder (container root file systems,
sandboxes' shm and network namespaces, pod volumes), its cgroups in every hierarchy, the shims'
sockets under /run/containerd/s, and the CNI results libcni caches in /var/lib/cni/results.

The cluster records a `kube-node` record in its run's ledger (clusters/cleaner.py) before its
containerd starts; this module registers the undo of that kind, so `fencecheck teardown --run
ID` (and the cluster's own teardown, which goes the same way) sweeps it after its processes are
killed and before its namespace is deleted. Its folder is removed too, except the logs, the
ledger and `results/` (evidence, and what the Jobs wrote).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from fencecheck.clusters.base import ClusterError
from fencecheck.clusters.cleaner import register_undo
from fencecheck.clusters.reaper import _alive, kill_pids

log = logging.getLogger(__name__)

KIND = "kube-node"
CGROUP_FS = Path("/sys/fs/cgroup")
SHIM_SOCKETS = Path("/run/containerd/s")
CNI_RESULTS = Path("/var/lib/cni/results")
KEEP = ("logs", "ledger.jsonl", "results")


def record(layout_dir: Path, cgroup_root: str, sock: Path, cni_network: str) -> dict[str, str]:
    """The fields of a `kube-node` ledger record (all a sweep needs)."""
    return {"dir": str(layout_dir), "cgroup_root": cgroup_root, "sock": str(sock),
            "cni_network": cni_network}


def cgroup_dirs(cgroup_root: str) -> list[Path]:
    """The cluster's cgroup root in every mounted hierarchy (v1 controllers, the unified one of
    a hybrid layout), where it exists."""
    rel = cgroup_root.strip("/")
    if not rel or not CGROUP_FS.is_dir():
        return []
    return [d / rel for d in sorted(CGROUP_FS.iterdir()) if (d / rel).is_dir()]


def cgroup_pids(cgroup_root: str) -> list[int]:
    """Every process in the cgroup root's trees."""
    pids: set[int] = set()
    for top in cgroup_dirs(cgroup_root):
        for procs in top.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                pids |= {int(p) for p in procs.read_text().split()}
    return sorted(pids)


def _cmdline(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def shim_pids(sock: str) -> list[int]:
    """containerd shims (and anything else) started with `-address SOCK`: the cluster's own."""
    want = sock.encode()
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and want in _cmdline(int(entry)):
            out.append(int(entry))
    return out


def points_under(mountinfo: str, root: Path) -> list[Path]:
    """The mount points of a mountinfo text at or below `root` (its octal escapes decoded),
    each once, deepest first: the order they can be unmounted in."""
    out = set()
    prefix = str(root).rstrip("/") + "/"
    for line in mountinfo.splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point == str(root) or point.startswith(prefix):
            out.add(Path(point))
    return sorted(out, key=lambda p: (-len(p.parts), str(p)))


def mounts_under(root: Path) -> list[Path]:
    """Mount points at or below `root` in this mount namespace, deepest first."""
    with open("/proc/self/mountinfo") as f:
        return points_under(f.read(), root)


def _unmount(points: list[Path]) -> list[str]:
    failed = []
    for p in points:
        res = subprocess.run(["umount", str(p)], capture_output=True, text=True)
        if res.returncode != 0:  # busy (a process of someone else's looking in): detach it
            lazy = subprocess.run(["umount", "-l", str(p)], capture_output=True, text=True)
            if lazy.returncode != 0 and p in mounts_under(p):
                failed.append(f"{p}: {lazy.stderr.strip() or res.stderr.strip()}")
    return failed


def _rmdir_tree(top: Path) -> list[str]:
    failed = []
    dirs = sorted((d for d in top.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts))
    for d in [*dirs, top]:
        try:
            d.rmdir()
        except FileNotFoundError:
            pass
        except OSError as e:
            failed.append(f"{d}: {e.strerror}")
    return failed


def _shim_sockets(state: Path) -> Iterator[Path]:
    """The shims' sockets, as each task's bundle names them (`address` file)."""
    tasks = state / "io.containerd.runtime.v2.task"
    for f in tasks.glob("*/*/address") if tasks.is_dir() else ():
        with contextlib.suppress(OSError):
            addr = f.read_text().strip().removeprefix("unix://")
            if addr.startswith(str(SHIM_SOCKETS) + "/"):
                yield Path(addr)


def _remove_data(folder: Path) -> None:
    if mounts_under(folder):  # never remove through a mount: it could be anyone's data
        raise ClusterError(f"{folder}: still has mounts under it; not removed")
    for child in folder.iterdir() if folder.is_dir() else ():
        if child.name in KEEP:
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def sweep(rec: Mapping[str, Any]) -> list[str]:
    """Remove what the cluster of `rec` (a `kube-node` record) left, in order: processes of its
    containers and its shims, its mounts, its cgroups, shim sockets and CNI results, its data.
    Idempotent; raises ClusterError listing what could not be removed."""
    folder, sock = Path(rec["dir"]), str(rec["sock"])
    removed: list[str] = []
    for _ in range(5):  # a dying container may have forked; go round until none are left
        pids = sorted(set(cgroup_pids(rec["cgroup_root"])) | set(shim_pids(sock)))
        pids = [p for p in pids if _alive(p)]
        if not pids:
            break
        kill_pids(pids)
        removed.append(f"{len(pids)} container process(es)")
    sockets = list(_shim_sockets(folder / "containerd" / "state"))
    points = mounts_under(folder)
    errors = _unmount(points)
    removed += [f"{len(points)} mount(s)"] if points else []
    for top in cgroup_dirs(rec["cgroup_root"]):
        errors += _rmdir_tree(top)
        removed.append(f"cgroup {top}")
    for s in sockets:
        with contextlib.suppress(FileNotFoundError):
            s.unlink()
            removed.append(f"shim socket {s}")
    for f in CNI_RESULTS.glob(f"{rec['cni_network']}-*") if CNI_RESULTS.is_dir() else ():
        f.unlink()
        removed.append(f"CNI result {f.name}")
    if errors:
        raise ClusterError("kube-node sweep: " + "; ".join(errors))
    _remove_data(folder)
    return removed


def leftovers(rec: Mapping[str, Any]) -> list[str]:
    """What of the cluster of `rec` is still on the host (empty once it is swept)."""
    folder, sock = Path(rec["dir"]), str(rec["sock"])
    out = [f"process {p} in {rec['cgroup_root']}" for p in cgroup_pids(rec["cgroup_root"])
           if _alive(p)]
    out += [f"shim {p}" for p in shim_pids(sock) if _alive(p)]
    out += [f"mount {p}" for p in mounts_under(folder)]
    out += [f"cgroup {d}" for d in cgroup_dirs(rec["cgroup_root"])]
    out += [f"shim socket {s}" for s in _shim_sockets(folder / "containerd" / "state")
            if s.exists()]
    if CNI_RESULTS.is_dir():
        out += [f"CNI result {f}" for f in CNI_RESULTS.glob(f"{rec['cni_network']}-*")]
    return out


def _undo(rec: Mapping[str, Any]) -> str | None:
    removed = sweep(rec)
    return f"kube node {rec['name']}: " + ", ".join(removed) if removed else None


register_undo(KIND, _undo)
