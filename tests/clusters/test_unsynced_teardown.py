"""The cleaner removes the lose-unsynced FUSE mounts a killed run left (issue 28): a controller
SIGKILLed after mounting leaves its file system running (its own session) or, killed too, a dead
mount; `teardown_all` (what `fencecheck teardown --all` runs) detaches both through the run's
ledger and ends the file system's process. A mount whose ledger is gone (a deleted store) is
found by the naming rule and detached by `fencecheck teardown --run`, its process found by the
run's marker. `teardown --all` itself is run on a private index here: on the global one it would
tear down the killed runs other tests are looking at."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fencecheck.clusters.cleaner import ENV_MARKER, claim_run_id, release_run_id, teardown_all
from fencecheck.clusters.faults import unsynced_ctl as ctl
from tests.conftest import run_fencecheck


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (FUSE mounts with allow_other)"
    if not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None:
        return "needs /dev/fuse and fusermount3 (bash scripts/setup.sh)"
    try:
        import pyfuse3  # noqa: F401
    except ImportError:
        return "needs pyfuse3 (pip install -e .; scripts/setup.sh installs libfuse3-dev)"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))

# A controller: a run's ledger, one node's file system mounted through it, its pid printed.
CONTROLLER = """
import sys, time
from pathlib import Path
from fencecheck.clusters.cleaner import Ledger
from fencecheck.clusters.faults.unsynced import UnsyncedMounts
run_dir, run_id, index = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
mounts = UnsyncedMounts(run_dir, run_id, Ledger(run_dir / "ledger.jsonl", run_id, index))
mounts.mount("n1")
print(mounts.procs["n1"].pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _killed_controller(run_dir: Path, run_id: str, index: Path) -> int:
    """Start a controller, wait for its mount, SIGKILL it; the file system's pid."""
    proc = subprocess.Popen([sys.executable, "-c", CONTROLLER, str(run_dir), run_id, str(index)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the file system answers its status by then
        assert line.strip().isdigit(), f"the controller did not mount (exit {proc.poll()})"
    finally:
        proc.kill()
        proc.communicate()
    return int(line)


@pytest.fixture
def run_ids() -> Iterator[list[str]]:
    """Fresh run ids, claimed in the machine's index (so no other run holds them), given back
    and swept of mounts at the end whatever happened."""
    ids: list[str] = []
    yield ids
    for rid in ids:
        with contextlib.suppress(Exception):
            ctl.sweep_run(rid)
        release_run_id(rid)


def test_teardown_all_unmounts_a_killed_runs_live_and_dead_mounts(
    tmp_path: Path, run_ids: list[str]
) -> None:
    index = tmp_path / "index"
    live, dead = claim_run_id(), claim_run_id()
    run_ids += [live, dead]
    fs_live = _killed_controller(tmp_path / live, live, index)
    fs_dead = _killed_controller(tmp_path / dead, dead, index)
    os.kill(fs_dead, signal.SIGKILL)  # the power cut took the file system too: a dead mount
    assert {live, dead} <= ctl.mounted_runs()  # what `teardown --all` looks for as orphans
    assert _alive(fs_live)
    removed = teardown_all(index, orphans=False)
    assert f"unsynced mount {ctl.fsname(live, 'n1')} at {tmp_path / live / 'unsynced/n1/mnt'}" \
        in removed
    assert any(r.startswith(f"unsynced mount {ctl.fsname(dead, 'n1')} ") for r in removed)
    assert ctl.mounts(ctl.fsname(live, "")) == ctl.mounts(ctl.fsname(dead, "")) == []
    assert not _alive(fs_live) and not _alive(fs_dead)
    assert not list(index.iterdir())  # both runs are done with
    assert os.listdir(tmp_path / live / "unsynced/n1/mnt") == []  # the store can be deleted


def test_teardown_run_unmounts_a_mount_whose_ledger_is_gone(
    tmp_path: Path, run_ids: list[str]
) -> None:
    rid = claim_run_id()
    run_ids.append(rid)
    lay = ctl.Layout.of(tmp_path, rid, "n2")
    proc = ctl.start(lay.mountpoint, lay.backing, lay.control, lay.fsname, timeout_s=60,
                     env={ENV_MARKER: rid})
    try:
        assert rid in ctl.mounted_runs()
        r = run_fencecheck("teardown", "--run", rid, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"unsynced mount {lay.fsname} at {lay.mountpoint} (by name)" in r.stdout
        assert ctl.mounts(ctl.fsname(rid, "")) == []
        proc.wait(30)  # found by its marker and killed
    finally:
        ctl.stop(proc, lay.mountpoint)
