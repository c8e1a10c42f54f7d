"""The controller's side of the lose-unsynced file system (clusters/faults/unsynced_fs.py): the
naming rule for its mounts, starting it, asking it to `lose` or for its `status` over its control
socket, and finding and lazily unmounting mounts that a killed run left behind.

This module imports neither pyfuse3 nor trio, so the cleaner can use it on any machine.

Naming rule: a run's file system for node NODE is mounted at `<run_dir>/unsynced/<NODE>/mnt`,
its backing directory is `<run_dir>/unsynced/<NODE>/data` and its control socket
`<run_dir>/unsynced/<NODE>/ctl.sock`; the mount's source (first field of /proc/mounts) is
`fencecheck-<run>-<NODE>` and its type `fuse.fc_unsynced`, so a cleaner finds a run's mounts by
source prefix, and any machine-wide leftovers by type, without live objects. A run records each
mount in its ledger (kind `unsynced-mount`, with its mountpoint) before making it; importing this
module teaches the cleaner to undo that kind (a lazy unmount; "not mounted" is already gone).

Protocol: one Unix stream connection per command; the client sends one line (`lose`, `status`,
or `sync`: make everything written so far durable), the file system answers one line of JSON
(an object with `"ok": true`, or `"ok": false` and `"error"`) and closes. Commands run between
two FUSE requests, never inside one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fencecheck.clusters.base import ClusterError
from fencecheck.clusters.cleaner import register_leftovers, register_undo

log = logging.getLogger(__name__)

FS_TYPE = "fuse.fc_unsynced"
SUBTYPE = "fc_unsynced"


class UnsyncedFsError(ClusterError):
    """The file system did not start, did not answer, or refused a command."""


@dataclass(frozen=True)
class Layout:
    """Where one node's lose-unsynced file system lives (the naming rule above)."""

    run_id: str
    node: str
    root: Path  # <run_dir>/unsynced/<node>

    @classmethod
    def of(cls, run_dir: Path, run_id: str, node: str) -> Layout:
        return cls(run_id, node, run_dir / "unsynced" / node)

    @property
    def mountpoint(self) -> Path:
        return self.root / "mnt"

    @property
    def backing(self) -> Path:
        return self.root / "data"

    @property
    def control(self) -> Path:
        return self.root / "ctl.sock"

    @property
    def fsname(self) -> str:
        return fsname(self.run_id, self.node)


def fsname(run_id: str, node: str) -> str:
    return f"fencecheck-{run_id}-{node}"


def argv(mountpoint: Path, backing: Path, control: Path, name: str,
         names: str = "posix") -> list[str]:
    """The command line that runs the file system as its own process, in the foreground."""
    return [sys.executable, "-m", "fencecheck.clusters.faults.unsynced_fs",
            str(mountpoint), str(backing), str(control), "--fsname", name, "--names", names]


def request(control: Path, command: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """Send one command and return the reply; raise UnsyncedFsError if it failed."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout_s)
            with short_path(control) as path:
                s.connect(path)
            s.sendall(command.encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
    except OSError as e:
        raise UnsyncedFsError(f"unsynced fs at {control}: {command}: {e}") from e
    try:
        reply: dict[str, Any] = json.loads(data)
    except ValueError as e:
        raise UnsyncedFsError(f"unsynced fs at {control}: {command}: bad reply {data!r}") from e
    if not reply.get("ok"):
        raise UnsyncedFsError(f"unsynced fs at {control}: {command}: {reply.get('error')}")
    return reply


@contextlib.contextmanager
def short_path(path: Path) -> Iterator[str]:
    """A name for `path` that fits a Unix socket address (108 bytes), however deep the run
    directory is: through an O_PATH descriptor on its directory."""
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def lose(control: Path, timeout_s: float = 30.0) -> dict[str, Any]:
    """Drop every unsynced byte and name change; the caller has stopped the writers first."""
    return request(control, "lose", timeout_s)


def status(control: Path, timeout_s: float = 10.0) -> dict[str, Any]:
    return request(control, "status", timeout_s)


def sync(control: Path, timeout_s: float = 10.0) -> dict[str, Any]:
    """Make everything written so far durable (a checkpoint, e.g. once the servers are up)."""
    return request(control, "sync", timeout_s)


def start(mountpoint: Path, backing: Path, control: Path, name: str,
          timeout_s: float = 10.0, log_path: Path | None = None,
          names: str = "posix", env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start the file system and wait until it answers `status` (it is mounted by then).
    A dead mount left at the mountpoint by a killed instance is detached first. `env` is added
    to the process's environment (the run's ledger marker: the cleaner finds it by that even if
    its controller died before recording its pid)."""
    if mounted(mountpoint):
        lazy_unmount(mountpoint)
    mountpoint.mkdir(parents=True, exist_ok=True)
    backing.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        control.unlink()
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(open(log_path, "ab")) if log_path else subprocess.DEVNULL
        # Its own session, as the servers' (setsid): a Ctrl-C or a SIGTERM to the controller's
        # process group must not unmount the data under servers still running; it is stopped
        # after them.
        proc = subprocess.Popen(argv(mountpoint, backing, control, name, names),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, **(env or {})})
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise UnsyncedFsError(f"unsynced fs {name} exited with {proc.returncode} at start"
                                  f"{_last_line(log_path)}")
        if control.exists():
            with contextlib.suppress(UnsyncedFsError):
                status(control, timeout_s=1.0)
                return proc
        if time.monotonic() > deadline:
            stop(proc, mountpoint)
            raise UnsyncedFsError(f"unsynced fs {name} not ready after {timeout_s} s")
        time.sleep(0.02)


def stop(proc: subprocess.Popen[bytes], mountpoint: Path, timeout_s: float = 10.0) -> None:
    """SIGTERM (the file system unmounts itself), then SIGKILL and a lazy unmount if needed."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if mounted(mountpoint):
        lazy_unmount(mountpoint)


def mounts(source_prefix: str = "fencecheck-") -> list[tuple[str, Path]]:
    """(source, mountpoint) of every lose-unsynced mount whose source starts with the prefix:
    `fencecheck-<run>-` for one run's, the default for any run's."""
    found = []
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 3 and fields[2] == FS_TYPE and fields[0].startswith(source_prefix):
                # /proc/mounts escapes spaces and the like as octal (\040)
                found.append((fields[0], Path(_unescape(fields[1]))))
    return found


def mounted(mountpoint: Path) -> bool:
    target = os.path.abspath(mountpoint)
    return any(str(m) == target for _, m in mounts(""))


def lazy_unmount(mountpoint: Path) -> None:
    """`fusermount3 -uz`: detach now even if busy; "not mounted" counts as done."""
    res = subprocess.run(["fusermount3", "-uz", str(mountpoint)], capture_output=True, text=True,
                         check=False)
    log.debug("fusermount3 -uz %s: %d %s", mountpoint, res.returncode, res.stderr.strip())
    if res.returncode != 0 and mounted(mountpoint):
        raise UnsyncedFsError(f"fusermount3 -uz {mountpoint}: {res.stderr.strip()}")


def _last_line(log_path: Path | None) -> str:
    """': ' and the last line of the file system's log (why it refused to start), if any."""
    try:
        lines = log_path.read_text(errors="replace").strip().splitlines() if log_path else []
    except OSError:
        lines = []
    return f": {lines[-1]}" if lines else ""


def _unescape(field: str) -> str:
    return field.encode().decode("unicode_escape")


MOUNT_KIND = "unsynced-mount"


def undo_mount(rec: Mapping[str, Any]) -> str | None:
    """The cleaner's undo of a recorded mount: detach it if it is still there (a killed run's
    file system process may be gone, leaving a dead mount that only an unmount removes)."""
    mountpoint = Path(str(rec["mountpoint"]))
    if not any(src == rec["name"] and m == mountpoint for src, m in mounts(str(rec["name"]))):
        return None
    lazy_unmount(mountpoint)
    return f"unsynced mount {rec['name']} at {mountpoint}"


def mounted_runs() -> set[str]:
    """The run ids of every lose-unsynced mount on this machine (the naming rule's source
    `fencecheck-<run>-<node>`), dead mounts included."""
    return {src.split("-", 2)[1] for src, _ in mounts() if src.count("-") >= 2}


def sweep_run(run_id: str) -> list[str]:
    """Detach every mount of run `run_id` the naming rule finds, recorded or not (a run whose
    ledger went with its store, or that died between its record and its mount)."""
    removed = []
    for src, mountpoint in mounts(f"{fsname(run_id, '')}"):
        lazy_unmount(mountpoint)
        removed.append(f"unsynced mount {src} at {mountpoint} (by name)")
    return removed


register_undo(MOUNT_KIND, undo_mount)
register_leftovers(MOUNT_KIND, mounted_runs, sweep_run)
