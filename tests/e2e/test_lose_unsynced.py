"""The lose-unsynced fault end to end (issue 28): a real redis-server in a network namespace with
its AOF directory on the lose-unsynced FUSE file system, the fault a power loss right after a
grant. `appendfsync everysec` forgets the grant it had not synced yet and grants the lock again:
double-grant, as do the 5 Redlock masters when a majority of them forgets it; `appendfsync
always` synced it before answering: none; nor etcd (three members, a majority losing power),
whose tokens keep increasing. The run is recorded and replays; a backend or runtime without the
capability is refused (exit 3); a SIGTERM mid-fault heals and unmounts; a killed run's mount is
found and removed by `fencecheck teardown`. Short runs, fixed seeds."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    fc_mounts,
    fencecheck_argv,
    run_directory,
    run_fencecheck,
    run_processes_alive,
)


def _missing() -> str | None:
    if not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None:
        return "needs /dev/fuse and fusermount3 (bash scripts/setup.sh)"
    try:
        import pyfuse3  # noqa: F401
    except ImportError:
        return "needs pyfuse3 (pip install -e .; scripts/setup.sh installs libfuse3-dev)"
    return None


pytestmark = [pytest.mark.netns, pytest.mark.usefixtures("no_leftovers"),
              pytest.mark.skipif(_missing() is not None, reason=str(_missing()))]

# A critical section (3 writes x 400 ms) longer than the fault's hold (0.2-1 s at the default
# 2 s lease): the holder still holds when the restarted server answers again.
REDIS = ("--backend", "redis", "--nemesis", "lose-unsynced", "--think-ms", "400",
         "--time-limit", "10", "--seed", "1")


def _run(store: Path, *args: str) -> tuple[int, dict[str, Any], Path, str]:
    r = run_fencecheck("run", "--store", str(store), *args, timeout=120)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    run_dir = run_directory(r.stdout)
    return r.returncode, json.loads((run_dir / "results.json").read_text()), run_dir, r.stdout


def _kinds(results: dict[str, Any]) -> set[str]:
    return {v["kind"] for c in results["checks"].values() for v in c["violations"]}


def _losses(run_dir: Path) -> list[dict[str, Any]]:
    events = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    return [e["value"]["lost"] for e in events
            if e["f"] == "start-lose-unsynced" and e["type"] == "ok"]


def test_redis_everysec_forgets_a_fresh_grant_double_grant_and_replays(tmp_path: Path) -> None:
    code, results, run_dir, out = _run(tmp_path / "store", *REDIS, "--persistence", "everysec")
    assert code == 1 and "double-grant" in _kinds(results), out
    losses = _losses(run_dir)
    assert losses and any(lost["n1"]["bytes_dropped"] > 0 for lost in losses), losses
    steps = json.loads((run_dir / "schedule.json").read_text())["steps"]
    assert steps and all(s["fault"] == "lose-unsynced" and s["waited"] for s in steps), steps
    assert all(s["value"] == {"nodes": ["n1"]} for s in steps)
    # the recorded schedule, played again on the same configuration, finds it again
    code, results, replay, out = _run(tmp_path / "replay", "--replay", str(run_dir))
    assert json.loads((replay / "test.json").read_text())["config"]["replay"]
    assert code == 1 and "double-grant" in _kinds(results), out


def test_redis_always_synced_every_grant_none(tmp_path: Path) -> None:
    code, results, run_dir, out = _run(tmp_path / "store", *REDIS, "--persistence", "always")
    assert code == 0 and not _kinds(results), out
    assert _losses(run_dir), "no lose-unsynced fault ran"


def test_redlock_a_majority_forgets_a_fresh_grant_double_grant(tmp_path: Path) -> None:
    # a hold (0.3-1 s) inside the critical section (3 x 800 ms) with a 10 s lease; seed 1 draws a
    # majority loss right after a grant (measured alone: found in 5 runs of 5; seeds 1-5: 4 of 5).
    # A loss finds the grant only if it lands before the masters' once-a-second fsync, and only if
    # no master comes back holding a key from its last fsync (a contender's minority SET whose DEL
    # was lost, or an earlier holder's) that blocks it until the key's 10 s TTL: in CI beside the
    # parallel suite, seed 1 lost the grant on three masters and two came back holding such keys,
    # so nobody could win a majority (VALID). Up to three seeds; the first that double-grants ends.
    for seed in ("1", "2", "3"):
        code, results, run_dir, out = _run(
            tmp_path / f"store-{seed}", "--backend", "redlock", "--persistence", "everysec",
            "--nemesis", "lose-unsynced", "--lease-ms", "10000", "--think-ms", "800",
            "--fault-duration", "0.3,1", "--time-limit", "25", "--seed", seed)
        assert any(len(lost) >= 3 for lost in _losses(run_dir)), _losses(run_dir)
        if code == 1 and "double-grant" in _kinds(results):
            break
    assert code == 1 and "double-grant" in _kinds(results), out


def test_etcd_syncs_before_it_answers_none_tokens_increasing(tmp_path: Path) -> None:
    code, results, run_dir, out = _run(tmp_path / "store", "--backend", "etcd", "--fencing", "on",
                                       "--nemesis", "lose-unsynced", "--think-ms", "400",
                                       "--time-limit", "12", "--seed", "1")
    assert code == 0 and not _kinds(results), out
    fencing = results["checks"]["fencing"]  # token-regression is its violation
    assert fencing["valid"] is True and fencing["grants_with_token"] > 0, fencing
    # seed 1 draws a majority (two of three members) losing what they had not synced
    assert any(len(lost) >= 2 for lost in _losses(run_dir)), _losses(run_dir)


@pytest.mark.parametrize(("args", "says"), [
    (("--backend", "mariadb"),
     "not supported by backend 'mariadb': it needs lose-unsynced"),
    (("--backend", "redis", "--runtime", "docker"), "not supported under --runtime docker"),
])
def test_a_service_or_runtime_without_the_capability_is_refused(
        tmp_path: Path, args: tuple[str, ...], says: str) -> None:
    r = run_fencecheck("run", "--store", str(tmp_path), *args, "--nemesis", "lose-unsynced",
                       "--time-limit", "5", timeout=60)
    assert r.returncode == 3, r.stdout + r.stderr
    assert says in r.stderr and "Traceback" not in r.stderr
    assert not list(tmp_path.glob("*/2*")), "refused before anything was created"


def _wait_for_a_fault(store: Path) -> None:
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline:
        logs = list(store.glob("*/latest/nemesis.jsonl"))
        if logs and "start-lose-unsynced" in logs[0].read_text():
            return
        time.sleep(0.1)
    pytest.fail("no lose-unsynced fault started within 45 s")


def _start(store: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(fencecheck_argv("run", "--store", str(store), *REDIS,
                                            "--persistence", "everysec", "--time-limit", "60"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def test_a_sigterm_to_the_group_mid_fault_heals_and_unmounts(tmp_path: Path) -> None:
    # the file systems run in their own session, as the servers do: the signal that stops the
    # run must not take the data away from servers that are still being stopped
    proc = _start(tmp_path)
    try:
        _wait_for_a_fault(tmp_path)
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM and "Traceback" not in err, err
    run_dir = next(tmp_path.glob("*/latest")).resolve()
    assert not fc_mounts(json.loads((run_dir / "test.json").read_text())["run_id"])
    assert not run_processes_alive(run_dir)
    assert (run_dir / "history.jsonl").exists()


def test_teardown_unmounts_what_a_killed_run_left(tmp_path: Path) -> None:
    proc = _start(tmp_path)
    try:
        _wait_for_a_fault(tmp_path)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
    run_dir = next(tmp_path.glob("*/latest")).resolve()
    rid = json.loads((run_dir / "test.json").read_text())["run_id"]
    assert fc_mounts(rid), "the killed run should have left its mount"
    r = run_fencecheck("teardown", "--run", rid, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "unsynced mount" in r.stdout
    assert not fc_mounts(rid)
    assert not run_processes_alive(run_dir)  # redis-server and the file system's process
