"""The lose-unsynced FUSE file system (clusters/faults/unsynced_fs.py), really mounted in a temp
dir: what `lose` drops and keeps (content by fsync, names by fsyncdir, O_SYNC writes), that
SIGTERM and a lazy unmount after SIGKILL leave no mount, and a real redis-server on it with
`appendfsync always` (the key survives) and `no` (it is gone)."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fencecheck.clusters.faults import unsynced_ctl as ctl


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (FUSE mounts with allow_other)"
    if not os.path.exists("/dev/fuse"):
        return "needs /dev/fuse"
    if shutil.which("fusermount3") is None:
        return "needs fusermount3 (apt-get install fuse3)"
    try:
        import pyfuse3  # noqa: F401
    except ImportError:
        return "needs pyfuse3 (pip install pyfuse3; apt-get install libfuse3-dev pkg-config)"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))


@dataclass
class Mount:
    mnt: Path
    backing: Path
    control: Path
    proc: subprocess.Popen[bytes]

    def lose(self) -> dict[str, object]:
        return ctl.lose(self.control)

    def status(self) -> dict[str, object]:
        return ctl.status(self.control)


@pytest.fixture
def fs(tmp_path: Path) -> Iterator[Mount]:
    # deeper than a Unix socket address can name (108 bytes): the control socket works anyway
    lay = ctl.Layout.of(tmp_path / ("deep-" * 12), "t" + os.urandom(3).hex(), "n1")
    assert len(str(lay.control)) > 108
    proc = ctl.start(lay.mountpoint, lay.backing, lay.control, lay.fsname,
                     log_path=tmp_path / "fs.log")
    try:
        yield Mount(lay.mountpoint, lay.backing, lay.control, proc)
    finally:
        ctl.stop(proc, lay.mountpoint)
    assert proc.returncode == 0, (tmp_path / "fs.log").read_text()
    assert not ctl.mounted(lay.mountpoint)
    assert str(lay.mountpoint) not in Path("/proc/mounts").read_text()
    assert not lay.control.exists()


def write(path: Path, data: bytes, sync: bool = False, flags: int = 0) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | flags, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def fsyncdir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def test_unsynced_content_is_lost_synced_kept(fs: Mount) -> None:
    a, b, c = fs.mnt / "a", fs.mnt / "b", fs.mnt / "c"
    write(a, b"v1", sync=True)
    write(b, b"never synced")
    fsyncdir(fs.mnt)  # a and b now have durable names; only a has durable content
    write(c, b"name never synced", sync=True)
    with open(a, "r+b") as f:
        f.write(b"V2 and more")  # overwrites the synced bytes and extends: all unsynced
    assert a.read_bytes() == b"V2 and more"  # pass-through: reads see unsynced writes
    assert (fs.backing / "a").read_bytes() == b"V2 and more"
    st = fs.status()
    assert st["dirty_files"] == 2 and st["dirty_dirs"] == 1

    out = fs.lose()
    assert out["bytes_dropped"] == len(b"V2 and more") - 2 + len(b"never synced")
    assert a.read_bytes() == b"v1"
    assert b.read_bytes() == b""  # its name was synced, its content never was
    assert not c.exists()  # its content was synced, its name never was
    assert sorted(os.listdir(fs.mnt)) == ["a", "b"]  # the attic stays hidden
    assert fs.status()["dirty_files"] == 0


def test_fsynced_writes_and_truncates_are_kept(fs: Mount) -> None:
    a = fs.mnt / "a"
    write(a, b"0123456789", sync=True)
    fsyncdir(fs.mnt)
    with open(a, "r+b") as f:
        f.seek(4)
        f.write(b"xx")
        f.flush()
        os.fsync(f.fileno())
        f.truncate(3)  # after the fsync: undone
    fs.lose()
    assert a.read_bytes() == b"0123xx6789"
    os.truncate(a, 2)
    with open(a, "r+b") as f:
        os.fdatasync(f.fileno())  # fdatasync counts as fsync
    with open(a, "ab") as f:
        f.write(b"appended")
    fs.lose()
    assert a.read_bytes() == b"01"


def test_o_sync_and_o_dsync_writes_count_as_synced(fs: Mount) -> None:
    a, b = fs.mnt / "a", fs.mnt / "b"
    write(a, b"", sync=True)
    write(b, b"", sync=True)
    fsyncdir(fs.mnt)
    for path, flag in ((a, os.O_SYNC), (b, os.O_DSYNC)):
        fd = os.open(path, os.O_WRONLY | flag)
        os.write(fd, b"durable")
        os.close(fd)
    fs.lose()
    assert a.read_bytes() == b"durable" and b.read_bytes() == b"durable"


def test_rename_unlink_mkdir_undone_without_fsyncdir_kept_with(fs: Mount) -> None:
    d = fs.mnt / "d"
    d.mkdir()
    fsyncdir(fs.mnt)
    write(d / "target", b"old", sync=True)
    write(d / "gone", b"keep me", sync=True)
    fsyncdir(d)
    # the write-temp, fsync, rename-over pattern, without the directory fsync
    write(d / "tmp", b"new", sync=True)
    os.rename(d / "tmp", d / "target")
    (d / "gone").unlink()
    (d / "sub").mkdir()
    (fs.mnt / "d").rename(fs.mnt / "d2")
    assert sorted(os.listdir(fs.mnt / "d2")) == ["sub", "target"]
    out = fs.lose()
    assert out["unrestorable"] == 0
    assert sorted(os.listdir(fs.mnt)) == ["d"]
    assert sorted(os.listdir(d)) == ["gone", "target"]
    assert (d / "target").read_bytes() == b"old"
    assert (d / "gone").read_bytes() == b"keep me"
    assert os.listdir(fs.backing / ".fc-unsynced-attic") == []

    write(d / "tmp", b"new", sync=True)
    os.rename(d / "tmp", d / "target")
    (d / "gone").unlink()
    fsyncdir(d)  # now the rename and the unlink are durable
    fs.lose()
    assert sorted(os.listdir(d)) == ["target"]
    assert (d / "target").read_bytes() == b"new"


def test_random_writes_and_truncates_come_back_to_the_last_fsync(fs: Mount) -> None:
    """Overlapping overwrites, extensions and truncates between random fsyncs, then a lose:
    the file is exactly its content at the last fsync (checks the saved-range bookkeeping)."""
    rng = random.Random(28)
    path = fs.mnt / "f"
    write(path, b"", sync=True)
    fsyncdir(fs.mnt)
    for _round in range(4):
        model = bytearray(path.read_bytes())
        synced = bytes(model)
        fd = os.open(path, os.O_RDWR)
        try:
            for _ in range(60):
                if rng.random() < 0.2:
                    size = rng.randrange(0, len(model) + 50)
                    os.ftruncate(fd, size)
                    model = model[:size] + bytes(max(0, size - len(model)))
                else:
                    off = rng.randrange(0, len(model) + 20)
                    data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
                    os.pwrite(fd, data, off)
                    model = model + bytes(max(0, off - len(model)))
                    model[off:off + len(data)] = data
                if rng.random() < 0.1:
                    os.fsync(fd)
                    synced = bytes(model)
            assert os.pread(fd, len(model) + 10, 0) == bytes(model)
        finally:
            os.close(fd)
        fs.lose()
        assert path.read_bytes() == synced


def test_unlinked_open_file_and_links_come_back(fs: Mount) -> None:
    a = fs.mnt / "a"
    write(a, b"v1", sync=True)
    fsyncdir(fs.mnt)
    fd = os.open(a, os.O_RDWR)
    a.unlink()
    os.pwrite(fd, b"v2", 0)
    os.fsync(fd)  # the content is durable, the unlink is not
    os.close(fd)
    os.symlink("a", fs.mnt / "s")
    write(fs.mnt / "b", b"b", sync=True)
    os.link(fs.mnt / "b", fs.mnt / "h")
    fs.lose()
    assert sorted(os.listdir(fs.mnt)) == ["a"]
    assert a.read_bytes() == b"v2"


def test_bad_arguments_exit_3_with_one_line(tmp_path: Path) -> None:
    res = subprocess.run([*ctl.argv(tmp_path / "nope", tmp_path, tmp_path / "c", "x")],
                         capture_output=True, text=True, timeout=30, check=False)
    assert res.returncode == 3
    assert res.stderr.strip().splitlines() == [f"unsynced_fs: mountpoint {tmp_path / 'nope'} "
                                               "is not a directory"]


def test_killed_fs_leaves_a_mount_that_lazy_unmount_removes(tmp_path: Path) -> None:
    lay = ctl.Layout.of(tmp_path, "k" + os.urandom(3).hex(), "n1")
    proc = ctl.start(lay.mountpoint, lay.backing, lay.control, lay.fsname)
    try:
        assert [m for _, m in ctl.mounts(f"fencecheck-{lay.run_id}-")] == [lay.mountpoint]
        proc.send_signal(signal.SIGKILL)
        proc.wait(5)
        assert ctl.mounted(lay.mountpoint)  # dead, still mounted: what the cleaner finds
        with pytest.raises(OSError):
            os.listdir(lay.mountpoint)  # ENOTCONN
    finally:
        ctl.stop(proc, lay.mountpoint)
    assert not ctl.mounted(lay.mountpoint)
    assert ctl.mounts(f"fencecheck-{lay.run_id}-") == []
    # a new instance over a dead mount detaches it first and serves the same backing data
    (lay.backing / "kept").write_bytes(b"x")
    proc = ctl.start(lay.mountpoint, lay.backing, lay.control, lay.fsname)
    proc.send_signal(signal.SIGKILL)
    proc.wait(5)
    proc = ctl.start(lay.mountpoint, lay.backing, lay.control, lay.fsname)
    try:
        assert os.listdir(lay.mountpoint) == ["kept"]
        assert len(ctl.mounts(f"fencecheck-{lay.run_id}-")) == 1
    finally:
        ctl.stop(proc, lay.mountpoint)
    assert ctl.mounts(f"fencecheck-{lay.run_id}-") == []


# ---- a real server on the mount ----------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _redis(dir_: Path, port: int, fsync: str) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--dir", str(dir_),
         "--appendonly", "yes", "--appendfsync", fsync, "--save", "", "--daemonize", "no",
         "--logfile", str(dir_.parent.parent / f"redis-{port}.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while _cli(port, "PING") != "PONG":
            assert proc.poll() is None and time.monotonic() < deadline, "redis did not start"
            time.sleep(0.05)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _cli(port: int, *args: str) -> str:
    res = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args],
                         capture_output=True, text=True, timeout=5, check=False)
    return res.stdout.strip()


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
@pytest.mark.parametrize(("names", "checkpoint", "fsync", "kept"), [
    ("posix", True, "always", True),
    ("posix", True, "no", False),
    # Measured with redis 7.0.15: it never fsyncs --dir after creating appendonlydir in it, so
    # under strict POSIX rules a power loss soon after the first start takes the whole AOF.
    ("posix", False, "always", False),
    # ext4/xfs commit their metadata journal whole at any fsync: the directory is kept.
    ("journal", False, "always", True),
    ("journal", False, "no", False),
])
def test_redis_aof_after_lose(tmp_path: Path, names: str, checkpoint: bool, fsync: str,
                              kept: bool) -> None:
    lay = ctl.Layout.of(tmp_path, "r" + os.urandom(3).hex(), "n1")
    fs = ctl.start(lay.mountpoint, lay.backing, lay.control, lay.fsname, names=names)
    try:
        data = lay.mountpoint / "redis"
        data.mkdir()
        fsyncdir(lay.mountpoint)
        port = _free_port()
        with _redis(data, port, fsync) as proc:
            if checkpoint:
                ctl.sync(lay.control)
            before = ctl.status(lay.control)
            assert _cli(port, "SET", "lock", "holder-1") == "OK"
            st = ctl.status(lay.control)
            proc.kill()  # a crash: redis gets no chance to fsync on its way out
            proc.wait()
        if fsync == "no":
            # redis did not fsync the AOF after the SET: the SET is only in unsynced bytes
            assert st["fsyncs"] == before["fsyncs"] and int(st["unsynced_bytes"]) > 0
        else:
            assert int(st["fsyncs"]) > int(before["fsyncs"])
        out = ctl.lose(lay.control)
        assert out["unrestorable"] == 0
        assert (data / "appendonlydir").exists() == (checkpoint or names == "journal")
        with _redis(data, port, fsync):
            got = _cli(port, "GET", "lock")
        assert got == ("holder-1" if kept else "")
    finally:
        ctl.stop(fs, lay.mountpoint)
    assert not ctl.mounted(lay.mountpoint)
