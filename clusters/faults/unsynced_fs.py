"""The lose-unsynced file system: a FUSE pass-through over a backing directory that remembers
what has not been made durable yet, so that a `lose` command puts every file and directory back
to its state at its last sync, as a power loss would. Its own code (pyfuse3), not lazyfs's.

Run: `python -m fencecheck.clusters.faults.unsynced_fs MOUNTPOINT BACKING CONTROL [--fsname N]`.
It mounts, then answers `lose`, `sync` and `status` on the Unix socket CONTROL (protocol and naming
rule: clusters/faults/unsynced_ctl.py); SIGTERM or SIGINT unmounts and exits. `--names` picks when
a name change becomes durable: `posix` (the default) at an fsyncdir of its directory, `journal`
at any fsync or fsyncdir on the mount (as ext4 and xfs, whose one metadata journal commits whole).
This module is that command and its control server; the model below is in unsynced_model.py,
the FUSE handlers in unsynced_ops.py.

What is modelled
- Every read and write goes through to BACKING at once (reads see the latest writes); what is
  kept in memory is the undo information, never the new data.
- File content: a file is durable up to its last `fsync` or `fdatasync` (both the same here), and
  a write through a handle opened `O_SYNC` or `O_DSYNC` syncs the whole file right after it. From
  the first change after a sync the file keeps its synced size and, for each byte range below
  that size that a write or a shrinking truncate touches for the first time, the synced bytes
  (so appends cost nothing and memory is bounded by the synced size). `lose` writes those bytes
  back and truncates to the synced size: a never-synced file comes back empty.
- Names: a directory's entries are durable at its last `fsyncdir`. From the first change in a
  directory after a sync (create, mkdir, symlink, link, unlink, rmdir, rename from or into it) it
  keeps its synced entries (name -> backing inode). An unlinked or replaced file or directory that
  some dirty directory still names is moved, not removed, to a hidden attic in BACKING's root
  (`.fc-unsynced-attic`), so `lose` can put it back. `lose` then, in every dirty directory,
  moves away each name the synced entries do not have (or that now names another inode), links
  or renames back each synced name that is missing, and empties the attic.
- So: an unsynced creation is undone (the file is gone), an unsynced unlink or rename is undone
  (the old name is back, with that file's own synced content), a synced one is kept.

What differs from a real disk. Keeps more than a power loss could (a finding is missed, never
invented):
- Metadata other than names and sizes (mode, owner, times, xattrs) is never lost.
- No torn or reordered writes, no page or sector granularity: unsynced bytes are all lost
  together, synced ones all kept; a crash in the middle of an fsync is not modelled.
- An O_SYNC write syncs the whole file, not only its range (Linux syncs the range).
- `sync` (the command) makes everything durable at once, as sync(1) on a real disk.
Loses more than ext4 or xfs would (a finding may be the file system's rule, not the server's bug):
- With `--names posix`, `fsync` of a file does not make its own new name durable (POSIX; ext4 in
  practice does): a program that creates a file, fsyncs it and never fsyncs the directory loses
  the file. Measured: redis 7.0 never fsyncs its --dir after creating appendonlydir there, so it
  loses its whole AOF unless a `sync` checkpoint was taken after it started, or `--names journal`.
- `sync()`, `syncfs()` and `sync_file_range()` reach no FUSE file system as a request, so they
  sync nothing here; writes through a shared writable mmap count only when the kernel writes the
  pages back to us.
Other:
- A name that a dirty directory still holds keeps a hard link in the attic, so st_nlink of a
  file unlinked or replaced since its directory's last sync reads one more than on a real disk.
- A directory renamed into a directory that was then synced, out of one that was not, stays in its
  new place (a directory cannot have two names); a file in that case gets both names back.
- `lose` while a writer still has files open restores them under it: stop the writers first
  (`status` reports `open_handles`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pyfuse3
import trio

from fencecheck.clusters.faults.unsynced_ctl import SUBTYPE, short_path
from fencecheck.clusters.faults.unsynced_model import ATTIC, NAMES_MODES
from fencecheck.clusters.faults.unsynced_ops import UnsyncedFs

__all__ = ["ATTIC", "NAMES_MODES", "UnsyncedFs", "main"]

log = logging.getLogger(__name__)


async def _serve_control(fs: UnsyncedFs, control: Path) -> None:
    sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    with contextlib.suppress(FileNotFoundError):
        control.unlink()
    with short_path(control) as path:
        await sock.bind(path)
    os.chmod(control, 0o600)
    sock.listen(8)
    while True:
        conn, _ = await sock.accept()
        with conn:
            data = b""
            while not data.endswith(b"\n") and len(data) < 1024:
                chunk = await conn.recv(1024)
                if not chunk:
                    break
                data += chunk
            command = data.decode(errors="replace").strip()
            # No await between here and the reply: a command runs between two FUSE requests,
            # never in the middle of one (all of them run on this one trio thread).
            try:
                if command == "lose":
                    reply: dict[str, Any] = {"ok": True, **fs.lose()}
                elif command == "sync":
                    reply = {"ok": True, **fs.sync()}
                elif command == "status":
                    reply = {"ok": True, **fs.status()}
                else:
                    reply = {"ok": False, "error": f"unknown command {command!r}"}
            except Exception as e:  # a bug here must not take the mount down with it
                log.exception("control %s failed", command)
                reply = {"ok": False, "error": f"{command}: {e}"}
            out = json.dumps(reply).encode() + b"\n"
            with contextlib.suppress(OSError):
                while out:
                    out = out[await conn.send(out):]


async def _run(fs: UnsyncedFs, control: Path) -> None:
    async with trio.open_nursery() as nursery:
        async def stop_on_signal() -> None:
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    pyfuse3.terminate()
                    return

        nursery.start_soon(stop_on_signal)
        nursery.start_soon(_serve_control, fs, control)
        await pyfuse3.main()
        nursery.cancel_scope.cancel()


def main(args: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fencecheck.clusters.faults.unsynced_fs",
                                description="FUSE pass-through that can lose unsynced writes")
    p.add_argument("mountpoint", type=Path)
    p.add_argument("backing", type=Path)
    p.add_argument("control", type=Path, help="Unix socket for the lose/status commands")
    p.add_argument("--fsname", default="fencecheck-unsynced",
                   help="the mount's source in /proc/mounts (naming rule: unsynced_ctl.py)")
    p.add_argument("--names", choices=NAMES_MODES, default="posix",
                   help="posix: a name change is durable at its directory's fsyncdir; journal: "
                        "at any fsync or fsyncdir (ext4/xfs commit their metadata journal whole)")
    p.add_argument("--debug", action="store_true")
    a = p.parse_args(args)
    logging.basicConfig(level=logging.DEBUG if a.debug else logging.INFO,
                        format="%(asctime)s unsynced_fs %(levelname)s %(message)s")
    for what, path in (("mountpoint", a.mountpoint), ("backing", a.backing)):
        if not path.is_dir():
            print(f"unsynced_fs: {what} {path} is not a directory", file=sys.stderr)
            return 3
    if not os.path.exists("/dev/fuse"):
        print("unsynced_fs: /dev/fuse is missing", file=sys.stderr)
        return 3
    fs = UnsyncedFs(a.backing, a.names)
    options = set(pyfuse3.default_options)
    options |= {f"fsname={a.fsname}", f"subtype={SUBTYPE}", "allow_other"}
    try:
        pyfuse3.init(fs, str(a.mountpoint), options)
    except RuntimeError as e:
        print(f"unsynced_fs: cannot mount {a.mountpoint}: {e}", file=sys.stderr)
        return 3
    try:
        trio.run(_run, fs, a.control)
    finally:
        pyfuse3.close(unmount=True)
        with contextlib.suppress(FileNotFoundError):
            a.control.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
