"""The lose-unsynced file system: a FUSE pass-through over a backing directory that remembers
what has not been made durable yet, so that a `lose` command puts every file and directory back
to its state at its last sync, as a power loss would. Its own code (pyfuse3), not lazyfs's.

Run: `python -m fencecheck.clusters.faults.unsynced_fs MOUNTPOINT BACKING CONTROL [--fsname N]`.
It mounts, then answers `lose`, `sync` and `status` on the Unix socket CONTROL (protocol and naming
rule: clusters/faults/unsynced_ctl.py); SIGTERM or SIGINT unmounts and exits. `--names` picks when
a name change becomes durable: `posix` (the default) at an fsyncdir of its directory, `journal`
at any fsync or fsyncdir on the mount (as ext4 and xfs, whose one metadata journal commits whole).

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
import errno
import functools
import json
import logging
import os
import shutil
import signal
import stat
import sys
from bisect import bisect_right, insort
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyfuse3
import trio
from pyfuse3 import FUSEError

from fencecheck.clusters.faults.unsynced_ctl import SUBTYPE, short_path

log = logging.getLogger(__name__)

ATTIC = ".fc-unsynced-attic"
NAMES_MODES = ("posix", "journal")
_ATTIC_B = ATTIC.encode()


@contextlib.contextmanager
def _oserror() -> Iterator[None]:
    """FUSE handlers may raise only FUSEError: pass the backing call's errno on."""
    try:
        yield
    except OSError as e:
        raise FUSEError(e.errno or errno.EIO) from e


def _proc(fd: int) -> str:
    return f"/proc/self/fd/{fd}"


@dataclass
class Node:
    """An inode the kernel knows: an O_PATH descriptor on its backing inode, and how many
    lookups the kernel holds (it is closed when they are all forgotten)."""

    fd: int
    lookups: int = 0


@dataclass
class DirtyFile:
    """A file changed since its last sync: its synced size and the synced bytes of every range
    below that size overwritten since (disjoint, keyed by offset)."""

    fd: int  # its own O_PATH descriptor, so it can be restored wherever it now lives
    synced_size: int
    starts: list[int] = field(default_factory=list)
    saved: dict[int, bytes] = field(default_factory=dict)

    def gaps(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The parts of [lo, hi) below the synced size not saved yet."""
        hi = min(hi, self.synced_size)
        out = []
        i = bisect_right(self.starts, lo) - 1
        pos = lo
        if i >= 0:
            s = self.starts[i]
            pos = max(pos, s + len(self.saved[s]))
        i += 1
        while pos < hi:
            nxt = self.starts[i] if i < len(self.starts) else hi
            if nxt > pos:
                out.append((pos, min(nxt, hi)))
            if i >= len(self.starts):
                break
            pos = max(pos, nxt + len(self.saved[nxt]))
            i += 1
        return out

    def save(self, off: int, data: bytes) -> None:
        if data:
            insort(self.starts, off)
            self.saved[off] = data

    def saved_bytes(self) -> int:
        return sum(len(b) for b in self.saved.values())


@dataclass
class DirtyDir:
    """A directory changed since its last fsyncdir: its synced entries, name -> backing inode."""

    fd: int
    synced: dict[bytes, int]


@dataclass
class Handle:
    fd: int
    ino: int
    sync: bool  # opened O_SYNC or O_DSYNC: every write is synced at once


class UnsyncedFs(pyfuse3.Operations):
    """The pass-through file system and its durability model (the module docstring)."""

    def __init__(self, backing: Path, names: str = "posix") -> None:
        super().__init__()
        if names not in NAMES_MODES:
            raise ValueError(f"names must be one of {NAMES_MODES}, not {names!r}")
        self.names = names
        self.root_fd = os.open(backing, os.O_PATH | os.O_DIRECTORY)
        root_st = os.stat(self.root_fd)
        self.dev = root_st.st_dev
        self.root_ino = root_st.st_ino
        with contextlib.suppress(FileExistsError):
            os.mkdir(ATTIC, 0o700, dir_fd=self.root_fd)
        self.attic_fd = os.open(ATTIC, os.O_PATH | os.O_DIRECTORY, dir_fd=self.root_fd)
        self._clear_attic()  # what a killed earlier instance left there is garbage now
        self.nodes: dict[int, Node] = {pyfuse3.ROOT_INODE: Node(self.root_fd, 1)}
        self.handles: dict[int, Handle] = {}
        self.dirs_open: dict[int, tuple[int, list[tuple[bytes, pyfuse3.EntryAttributes]]]] = {}
        self.next_fh = 1
        self.files: dict[int, DirtyFile] = {}  # by backing inode
        self.dirty_dirs: dict[int, DirtyDir] = {}  # by backing inode
        self.counts = {"fsyncs": 0, "fsyncdirs": 0, "loses": 0, "writes": 0}

    # ---- inode bookkeeping -------------------------------------------------------------
    def _fuse_ino(self, backing_ino: int) -> int:
        return pyfuse3.ROOT_INODE if backing_ino == self.root_ino else backing_ino

    def _backing_ino(self, ino: int) -> int:
        return self.root_ino if ino == pyfuse3.ROOT_INODE else ino

    def _fd(self, ino: int) -> int:
        node = self.nodes.get(ino)
        if node is None:
            raise FUSEError(errno.ESTALE)
        return node.fd

    def _attr(self, st: os.stat_result) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = self._fuse_ino(st.st_ino)
        # Zero timeouts: after a `lose` the kernel must not trust a cached name or size.
        a.entry_timeout = 0
        a.attr_timeout = 0
        for name in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_rdev", "st_size",
                     "st_blksize", "st_blocks", "st_atime_ns", "st_mtime_ns", "st_ctime_ns"):
            setattr(a, name, getattr(st, name))
        return a

    def _remember(self, parent_fd: int, name: bytes) -> pyfuse3.EntryAttributes:
        """Stat a name and count one kernel lookup of its inode."""
        st = os.lstat(name, dir_fd=parent_fd)
        ino = self._fuse_ino(st.st_ino)
        node = self.nodes.get(ino)
        if node is None:
            node = self.nodes[ino] = Node(os.open(name, os.O_PATH | os.O_NOFOLLOW,
                                                  dir_fd=parent_fd))
        node.lookups += 1
        return self._attr(st)

    def _check_name(self, parent: int, name: bytes) -> None:
        if parent == pyfuse3.ROOT_INODE and name == _ATTIC_B:
            raise FUSEError(errno.EPERM)

    # ---- the durability model ----------------------------------------------------------
    def _dirty_file(self, fd: int) -> DirtyFile:
        st = os.stat(fd)
        d = self.files.get(st.st_ino)
        if d is None:
            d = self.files[st.st_ino] = DirtyFile(os.dup(fd), st.st_size)
        return d

    def _before_change(self, fd: int, lo: int, hi: int) -> None:
        """Save the synced bytes of [lo, hi) that are about to change (fd: any descriptor)."""
        d = self._dirty_file(fd)
        gaps = d.gaps(lo, hi)
        if not gaps:
            return
        # fd may be O_PATH (not readable): read the inode through /proc instead.
        rfd = os.open(_proc(d.fd), os.O_RDONLY)
        try:
            for a, b in gaps:
                d.save(a, os.pread(rfd, b - a, a))
        finally:
            os.close(rfd)

    def _synced(self, fd: int) -> None:
        d = self.files.pop(os.stat(fd).st_ino, None)
        if d is not None:
            os.close(d.fd)
        if self.names == "journal":
            self._names_synced()

    def _names_synced(self) -> None:
        """Every name change so far is durable (a metadata journal committed)."""
        for dd in self.dirty_dirs.values():
            os.close(dd.fd)
        self.dirty_dirs.clear()
        self._clear_attic()

    def sync(self) -> dict[str, Any]:
        """Make everything durable now, as sync(1) would on a real disk: a checkpoint the
        fault can take once the servers have started, so that only what they write after it
        is at stake."""
        out = {"files_synced": len(self.files), "dirs_synced": len(self.dirty_dirs)}
        for d in self.files.values():
            os.close(d.fd)
        self.files.clear()
        self._names_synced()
        return out

    def _dirty_dir(self, dir_fd: int) -> None:
        st = os.stat(dir_fd)
        if st.st_ino in self.dirty_dirs:
            return
        self.dirty_dirs[st.st_ino] = DirtyDir(os.dup(dir_fd), self._entries(dir_fd))

    def _entries(self, dir_fd: int) -> dict[bytes, int]:
        is_root = os.stat(dir_fd).st_ino == self.root_ino
        fd = os.open(_proc(dir_fd), os.O_RDONLY | os.O_DIRECTORY)
        try:
            names = [os.fsencode(n) for n in os.listdir(fd)]
        finally:
            os.close(fd)
        out = {}
        for n in names:
            if is_root and n == _ATTIC_B:
                continue
            with contextlib.suppress(FileNotFoundError):
                out[n] = os.lstat(n, dir_fd=dir_fd).st_ino
        return out

    def _referenced(self, ino: int) -> bool:
        return any(ino in d.synced.values() for d in self.dirty_dirs.values())

    def _put_away(self, dir_fd: int, name: bytes, st: os.stat_result, always: bool) -> bool:
        """Keep the inode a name is about to stop naming in the attic, if a dirty directory
        still names it (or `always`). False: the caller removes or replaces the name itself."""
        key = str(st.st_ino)
        if not (always or self._referenced(st.st_ino)):
            return False
        if stat.S_ISDIR(st.st_mode):
            key = self._free_attic_name(key)
            os.rename(name, key, src_dir_fd=dir_fd, dst_dir_fd=self.attic_fd)
            return True
        if not _exists(key, self.attic_fd):
            os.link(name, key, src_dir_fd=dir_fd, dst_dir_fd=self.attic_fd,
                    follow_symlinks=False)
        return False

    def _free_attic_name(self, key: str) -> str:
        n, k = 0, key
        while _exists(k, self.attic_fd):
            n += 1
            k = f"{key}.{n}"
        return k

    def _clear_attic(self) -> None:
        fd = os.open(_proc(self.attic_fd), os.O_RDONLY | os.O_DIRECTORY)
        try:
            for n in os.listdir(fd):
                if stat.S_ISDIR(os.lstat(n, dir_fd=fd).st_mode):
                    shutil.rmtree(n, dir_fd=fd)
                else:
                    os.unlink(n, dir_fd=fd)
        finally:
            os.close(fd)

    def _gc_attic(self) -> None:
        if not self.dirty_dirs:
            self._clear_attic()

    def lose(self) -> dict[str, Any]:
        """Put every file and directory back to its last synced state (the module docstring)."""
        out = {"files_restored": len(self.files), "dirs_restored": len(self.dirty_dirs),
               "bytes_dropped": 0, "names_removed": 0, "names_restored": 0, "unrestorable": 0,
               "open_handles": len(self.handles)}
        for d in self.files.values():
            fd = os.open(_proc(d.fd), os.O_WRONLY)
            try:
                out["bytes_dropped"] += max(0, os.fstat(fd).st_size - d.synced_size)
                for off, data in d.saved.items():
                    os.pwrite(fd, data, off)
                os.ftruncate(fd, d.synced_size)
            finally:
                os.close(fd)
        for dd in self.dirty_dirs.values():
            for name, ino in self._entries(dd.fd).items():
                if dd.synced.get(name) != ino:
                    st = os.lstat(name, dir_fd=dd.fd)
                    if not self._put_away(dd.fd, name, st, always=True):
                        os.unlink(name, dir_fd=dd.fd)
                    out["names_removed"] += 1
        for dd in self.dirty_dirs.values():
            now = self._entries(dd.fd)
            for name, ino in dd.synced.items():
                if name not in now:
                    if self._bring_back(dd.fd, name, ino):
                        out["names_restored"] += 1
                    else:
                        out["unrestorable"] += 1
        for d in self.files.values():
            os.close(d.fd)
        for dd in self.dirty_dirs.values():
            os.close(dd.fd)
        self.files.clear()
        self.dirty_dirs.clear()
        self._clear_attic()
        self.counts["loses"] += 1
        log.info("lose: %s", out)
        return out

    def _bring_back(self, dir_fd: int, name: bytes, ino: int) -> bool:
        key = str(ino)
        if _exists(key, self.attic_fd):
            st = os.lstat(key, dir_fd=self.attic_fd)
            if stat.S_ISDIR(st.st_mode):
                os.rename(key, name, src_dir_fd=self.attic_fd, dst_dir_fd=dir_fd)
            else:
                os.link(key, name, src_dir_fd=self.attic_fd, dst_dir_fd=dir_fd,
                        follow_symlinks=False)
            return True
        node = self.nodes.get(self._fuse_ino(ino))
        if node is not None and not stat.S_ISDIR(os.stat(node.fd).st_mode):
            with contextlib.suppress(OSError):
                os.link(_proc(node.fd), name, dst_dir_fd=dir_fd, follow_symlinks=True)
                return True
        log.warning("lose: cannot bring back %r (inode %d)", name, ino)
        return False

    def status(self) -> dict[str, Any]:
        unsynced = 0
        for d in self.files.values():
            with contextlib.suppress(OSError):
                unsynced += max(0, os.stat(d.fd).st_size - d.synced_size) + d.saved_bytes()
        return {"names": self.names, "dirty_files": len(self.files),
                "dirty_dirs": len(self.dirty_dirs),
                "unsynced_bytes": unsynced, "open_handles": len(self.handles), **self.counts}

    # ---- FUSE handlers -----------------------------------------------------------------
    async def lookup(self, parent_inode: int, name: bytes,
                     ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        if parent_inode == pyfuse3.ROOT_INODE and name == _ATTIC_B:
            raise FUSEError(errno.ENOENT)
        with _oserror():
            if name == b"." or (name == b".." and parent_inode == pyfuse3.ROOT_INODE):
                # the kernel counts these lookups too; the root's ".." stays inside the mount
                self._fd(parent_inode)  # ESTALE if the kernel forgot it
                node = self.nodes[parent_inode]
                node.lookups += 1
                return self._attr(os.stat(node.fd))
            return self._remember(self._fd(parent_inode), name)

    async def forget(self, inode_list: Sequence[tuple[int, int]]) -> None:
        for ino, n in inode_list:
            node = self.nodes.get(ino)
            if node is None or ino == pyfuse3.ROOT_INODE:
                continue
            node.lookups -= n
            if node.lookups <= 0:
                del self.nodes[ino]
                with contextlib.suppress(OSError):  # forget must not raise
                    os.close(node.fd)

    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        with _oserror():
            return self._attr(os.stat(self._fd(inode)))

    async def setattr(self, inode: int, attr: pyfuse3.EntryAttributes,
                      fields: pyfuse3.SetattrFields, fh: int | None,
                      ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        path = _proc(self._fd(inode))
        with _oserror():
            if fields.update_size:
                fd = self.handles[fh].fd if fh in self.handles else os.open(path, os.O_WRONLY)
                try:
                    size = os.fstat(fd).st_size
                    if attr.st_size < size:
                        self._before_change(fd, attr.st_size, size)
                    else:
                        self._dirty_file(fd)
                    os.ftruncate(fd, attr.st_size)
                finally:
                    if fh not in self.handles:
                        os.close(fd)
            if fields.update_mode:
                os.chmod(path, stat.S_IMODE(attr.st_mode))
            if fields.update_uid or fields.update_gid:
                os.chown(path, attr.st_uid if fields.update_uid else -1,
                         attr.st_gid if fields.update_gid else -1)
            if fields.update_atime or fields.update_mtime:
                st = os.stat(path)
                os.utime(path, ns=(attr.st_atime_ns if fields.update_atime else st.st_atime_ns,
                                   attr.st_mtime_ns if fields.update_mtime else st.st_mtime_ns))
            return self._attr(os.stat(self._fd(inode)))

    async def readlink(self, inode: int, ctx: pyfuse3.RequestContext) -> bytes:
        with _oserror():
            # readlinkat(fd, "") reads the link an O_PATH|O_NOFOLLOW descriptor is on
            return os.fsencode(os.readlink("", dir_fd=self._fd(inode)))

    def _new_entry(self, parent_inode: int, name: bytes, make: Callable[[int], None],
                   ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        self._check_name(parent_inode, name)
        pfd = self._fd(parent_inode)
        with _oserror():
            self._dirty_dir(pfd)
            make(pfd)
            os.chown(name, ctx.uid, ctx.gid, dir_fd=pfd, follow_symlinks=False)
            return self._remember(pfd, name)

    async def mknod(self, parent_inode: int, name: bytes, mode: int, rdev: int,
                    ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        return self._new_entry(parent_inode, name, lambda pfd: os.mknod(
            name, mode & ~ctx.umask, rdev, dir_fd=pfd), ctx)

    async def mkdir(self, parent_inode: int, name: bytes, mode: int,
                    ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        return self._new_entry(parent_inode, name, lambda pfd: os.mkdir(
            name, mode & ~ctx.umask, dir_fd=pfd), ctx)

    async def symlink(self, parent_inode: int, name: bytes, target: bytes,
                      ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        return self._new_entry(parent_inode, name, lambda pfd: os.symlink(
            target, name, dir_fd=pfd), ctx)

    async def link(self, inode: int, new_parent_inode: int, new_name: bytes,
                   ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        self._check_name(new_parent_inode, new_name)
        pfd = self._fd(new_parent_inode)
        with _oserror():
            self._dirty_dir(pfd)
            os.link(_proc(self._fd(inode)), new_name, dst_dir_fd=pfd, follow_symlinks=True)
            return self._remember(pfd, new_name)

    def _remove(self, parent_inode: int, name: bytes, is_dir: bool) -> None:
        pfd = self._fd(parent_inode)
        self._check_name(parent_inode, name)
        with _oserror():
            st = os.lstat(name, dir_fd=pfd)
            if is_dir and not stat.S_ISDIR(st.st_mode):
                raise FUSEError(errno.ENOTDIR)
            if not is_dir and stat.S_ISDIR(st.st_mode):
                raise FUSEError(errno.EISDIR)
            if is_dir:
                fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=pfd)
                try:
                    if os.listdir(fd):
                        raise FUSEError(errno.ENOTEMPTY)
                finally:
                    os.close(fd)
            self._dirty_dir(pfd)
            if not self._put_away(pfd, name, st, always=False):
                if is_dir:
                    os.rmdir(name, dir_fd=pfd)
                else:
                    os.unlink(name, dir_fd=pfd)

    async def unlink(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        self._remove(parent_inode, name, is_dir=False)

    async def rmdir(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        self._remove(parent_inode, name, is_dir=True)

    async def rename(self, parent_inode_old: int, name_old: bytes, parent_inode_new: int,
                     name_new: bytes, flags: int, ctx: pyfuse3.RequestContext) -> None:
        self._check_name(parent_inode_old, name_old)
        self._check_name(parent_inode_new, name_new)
        if flags & pyfuse3.RENAME_EXCHANGE:
            raise FUSEError(errno.EINVAL)
        old_fd, new_fd = self._fd(parent_inode_old), self._fd(parent_inode_new)
        with _oserror():
            src = os.lstat(name_old, dir_fd=old_fd)
            try:
                dst: os.stat_result | None = os.lstat(name_new, dir_fd=new_fd)
            except FileNotFoundError:
                dst = None
            if dst is not None and flags & pyfuse3.RENAME_NOREPLACE:
                raise FUSEError(errno.EEXIST)
            if dst is not None and dst.st_ino == src.st_ino:
                return  # both names one inode: rename(2) does nothing
            self._dirty_dir(old_fd)
            self._dirty_dir(new_fd)
            if dst is not None:
                if stat.S_ISDIR(dst.st_mode) and not stat.S_ISDIR(src.st_mode):
                    raise FUSEError(errno.EISDIR)
                if stat.S_ISDIR(src.st_mode) and not stat.S_ISDIR(dst.st_mode):
                    raise FUSEError(errno.ENOTDIR)
                if stat.S_ISDIR(dst.st_mode):
                    fd = os.open(name_new, os.O_RDONLY | os.O_DIRECTORY, dir_fd=new_fd)
                    try:
                        if os.listdir(fd):
                            raise FUSEError(errno.ENOTEMPTY)
                    finally:
                        os.close(fd)
                self._put_away(new_fd, name_new, dst, always=False)
            os.rename(name_old, name_new, src_dir_fd=old_fd, dst_dir_fd=new_fd)

    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        with _oserror():
            fd = os.open(_proc(self._fd(inode)), self._backing_flags(flags))
            if flags & os.O_TRUNC:
                self._before_change(fd, 0, os.fstat(fd).st_size)
                os.ftruncate(fd, 0)
        return self._handle(fd, inode, flags)

    async def create(self, parent_inode: int, name: bytes, mode: int, flags: int,
                     ctx: pyfuse3.RequestContext) -> tuple[pyfuse3.FileInfo,
                                                           pyfuse3.EntryAttributes]:
        self._check_name(parent_inode, name)
        pfd = self._fd(parent_inode)
        with _oserror():
            self._dirty_dir(pfd)
            fd = os.open(name, self._backing_flags(flags) | os.O_CREAT | (flags & os.O_EXCL),
                         mode & ~ctx.umask, dir_fd=pfd)
            os.fchown(fd, ctx.uid, ctx.gid)
            attr = self._remember(pfd, name)
        return self._handle(fd, attr.st_ino, flags), attr

    def _backing_flags(self, flags: int) -> int:
        # Always read-write (the undo needs to read what a write overwrites); offsets come from
        # the kernel, so no O_APPEND; durability is ours to model, so no O_SYNC on the backing.
        drop = (os.O_ACCMODE | os.O_APPEND | os.O_SYNC | os.O_DSYNC | os.O_TRUNC | os.O_CREAT
                | os.O_EXCL | getattr(os, "O_DIRECT", 0) | os.O_NOCTTY)
        return (flags & ~drop) | os.O_RDWR | os.O_CLOEXEC

    def _handle(self, fd: int, ino: int, flags: int) -> pyfuse3.FileInfo:
        fh = self.next_fh
        self.next_fh += 1
        self.handles[fh] = Handle(fd, ino, bool(flags & os.O_DSYNC))
        return pyfuse3.FileInfo(fh=fh, keep_cache=False)

    async def read(self, fh: int, off: int, size: int) -> bytes:
        with _oserror():
            return os.pread(self.handles[fh].fd, size, off)

    async def write(self, fh: int, off: int, buf: bytes) -> int:
        h = self.handles[fh]
        with _oserror():
            self._before_change(h.fd, off, off + len(buf))
            n = os.pwrite(h.fd, buf, off)
            self.counts["writes"] += 1
            if h.sync:
                self._synced(h.fd)
            return n

    async def flush(self, fh: int) -> None:
        pass

    async def release(self, fh: int) -> None:
        h = self.handles.pop(fh, None)
        if h is not None:
            os.close(h.fd)

    async def fsync(self, fh: int, datasync: bool) -> None:
        with _oserror():
            self._synced(self.handles[fh].fd)
        self.counts["fsyncs"] += 1

    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        pfd = self._fd(inode)
        with _oserror():
            entries = []
            for name in sorted(self._entries(pfd)):
                with contextlib.suppress(FileNotFoundError):
                    entries.append((name, self._attr(os.lstat(name, dir_fd=pfd))))
        fh = self.next_fh
        self.next_fh += 1
        self.dirs_open[fh] = (inode, entries)
        return fh

    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        _, entries = self.dirs_open[fh]
        for i in range(start_id, len(entries)):
            name, attr = entries[i]
            if not pyfuse3.readdir_reply(token, name, attr, i + 1):
                break

    async def releasedir(self, fh: int) -> None:
        self.dirs_open.pop(fh, None)

    async def fsyncdir(self, fh: int, datasync: bool) -> None:
        ino, _ = self.dirs_open[fh]
        with _oserror():
            if self.names == "journal":
                self._names_synced()
            dd = self.dirty_dirs.pop(os.stat(self._fd(ino)).st_ino, None)
            if dd is not None:
                os.close(dd.fd)
            self._gc_attic()
        self.counts["fsyncdirs"] += 1

    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        s = os.statvfs(_proc(self.root_fd))
        out = pyfuse3.StatvfsData()
        for name in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files",
                     "f_ffree", "f_favail", "f_namemax"):
            setattr(out, name, getattr(s, name))
        return out


def _guarded(name: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """A handler that answers EIO (and logs) on a bug instead of raising past pyfuse3, which
    would end the main loop and so unmount the file system under a running server."""

    @functools.wraps(fn)
    async def handler(*args: Any) -> Any:
        try:
            return await fn(*args)
        except FUSEError:
            raise
        except OSError as e:
            raise FUSEError(e.errno or errno.EIO) from e
        except Exception as e:
            log.exception("%s%r failed", name, args[1:])
            raise FUSEError(errno.EIO) from e

    return handler


for _name in ("lookup", "getattr", "setattr", "readlink", "mknod", "mkdir", "symlink", "link",
              "unlink", "rmdir", "rename", "open", "create", "read", "write", "flush",
              "release", "fsync", "opendir", "readdir", "releasedir", "fsyncdir", "statfs"):
    setattr(UnsyncedFs, _name, _guarded(_name, getattr(UnsyncedFs, _name)))


def _exists(name: str, dir_fd: int) -> bool:
    try:
        os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    return True


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
