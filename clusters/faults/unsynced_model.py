"""The lose-unsynced file system's durability model (the rules are in unsynced_fs.py's
docstring): the records it keeps in memory (`DirtyFile`: a file's synced size and the synced bytes
overwritten since; `DirtyDir`: a directory's synced entries; `Node`, `Handle`), and `Durability`,
the state of one mount: inode bookkeeping, what a change saves first, what an fsync forgets, the
attic, and the `lose`, `sync` and `status` commands. The FUSE handlers that drive it are in
unsynced_ops.py."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import stat
from bisect import bisect_right, insort
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyfuse3
from pyfuse3 import FUSEError

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



def _exists(name: str, dir_fd: int) -> bool:
    try:
        os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    return True



class Durability:
    """The durability model of one mount (unsynced_fs.py's docstring), over its backing
    directory; UnsyncedFs (unsynced_ops.py) adds the FUSE handlers."""

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
