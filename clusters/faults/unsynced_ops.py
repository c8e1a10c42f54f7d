"""The lose-unsynced file system's FUSE handlers: `UnsyncedFs`, a pass-through to the backing
directory that tells its durability model (unsynced_model.py) about every change before making
it, and answers EIO on a bug rather than letting it end the mount (`_guarded`)."""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import stat
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pyfuse3
from pyfuse3 import FUSEError

from fencecheck.clusters.faults.unsynced_model import _ATTIC_B, Durability, Handle, _oserror, _proc

log = logging.getLogger(__name__)


class UnsyncedFs(Durability, pyfuse3.Operations):
    """The pass-through file system and its durability model (unsynced_fs.py's docstring)."""

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
