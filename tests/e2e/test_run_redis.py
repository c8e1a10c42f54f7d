"""End to end on the embedded default: real redis-server and the fenced store in network
namespaces, real worker processes, pause faults. Short runs, fixed seeds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import (
    fc_namespaces,
    fencecheck_argv,
    processes_matching,
    run_fencecheck,
    run_processes_alive,
    runs_under,
    stopped_processes,
)

pytestmark = [pytest.mark.netns, pytest.mark.usefixtures("no_leftovers")]

DAMAGE = {"stale-write-accepted", "interleaved-writes", "lost-update"}


def run(store: Path, *args: str, timeout: float = 120) -> tuple[int, dict[str, object], Path]:
    r = run_fencecheck("run", "--store", str(store), *args, timeout=timeout)
    assert r.returncode in (0, 1, 2), r.stdout + r.stderr
    runs = [p.resolve() for p in store.glob("*/latest")]
    assert len(runs) == 1
    results = json.loads((runs[0] / "results.json").read_text())
    return r.returncode, results, runs[0]


def kinds(results: dict[str, object]) -> set[str]:
    checks = results["checks"]
    assert isinstance(checks, dict)
    return {v["kind"] for c in checks.values() for v in c["violations"]}


def test_unfenced_redis_with_pauses_is_caught(tmp_path: Path) -> None:
    code, results, run_dir = run(tmp_path, "--fencing", "off", "--nemesis", "pause",
                                 "--time-limit", "12", "--lease-ms", "1000", "--seed", "1")
    assert code == 1
    assert kinds(results) & DAMAGE, results
    for f in ("test.json", "history.jsonl", "results.json", "fencecheck.log"):
        assert (run_dir / f).exists(), f
    history = (run_dir / "history.jsonl").read_text().splitlines()
    assert any('"start-pause"' in line for line in history)


def test_fenced_redis_with_pauses_is_valid_and_rejects_stale_writes(tmp_path: Path) -> None:
    code, results, _ = run(tmp_path, "--fencing", "on", "--nemesis", "pause",
                           "--time-limit", "12", "--lease-ms", "1000", "--seed", "1")
    assert code == 0, results
    stats = results["stats"]
    assert isinstance(stats, dict)
    assert stats["writes_rejected_by_fence"] > 0, stats


def test_no_faults_is_valid(tmp_path: Path) -> None:
    code, results, _ = run(tmp_path, "--nemesis", "none", "--time-limit", "5")
    assert code == 0, results
    assert results["valid"] is True


def run_id(run_dir: Path) -> str:
    rid = json.loads((run_dir / "test.json").read_text())["run_id"]
    assert isinstance(rid, str)
    return rid


def _latest_nemesis_log(store: Path) -> Path | None:
    logs = list(store.glob("*/latest/nemesis.jsonl"))
    return logs[0] if logs else None


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_pause_heals_tears_down_and_keeps_history(
    tmp_path: Path, sig: signal.Signals
) -> None:
    proc = subprocess.Popen(fencecheck_argv("run", "--store", str(tmp_path), "--time-limit",
                                            "60", "--lease-ms", "1000", "--seed", "2"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            nlog = _latest_nemesis_log(tmp_path)
            if nlog and '"ok","f":"start-pause"' in nlog.read_text().replace(" ", ""):
                break
            time.sleep(0.1)
        else:
            pytest.fail("no pause started within 45 s")
        assert stopped_processes(str(tmp_path)), "a worker should be paused right now"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # the test failed before the signal: do not leave the run behind
            proc.kill()
            proc.wait()
            for rid in runs_under(tmp_path):
                run_fencecheck("teardown", "--run", rid, timeout=120)
    assert proc.returncode == 128 + sig, out + err
    assert "Traceback" not in err
    run_dir = next(tmp_path.glob("*/latest")).resolve()
    assert not fc_namespaces(run_id(run_dir))
    assert not processes_matching(str(tmp_path))  # workers, store: all gone
    assert not run_processes_alive(run_dir)  # redis-server too, found by its recorded pid
    check = run_fencecheck("check", str(run_dir / "history.jsonl"), timeout=60)
    assert check.returncode in (0, 1, 2), check.stderr


def test_teardown_after_sigkill_leaves_nothing(tmp_path: Path) -> None:
    proc = subprocess.Popen(fencecheck_argv("run", "--store", str(tmp_path), "--time-limit",
                                            "60", "--lease-ms", "1000", "--seed", "3"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            nlog = _latest_nemesis_log(tmp_path)
            if nlog and "start-pause" in nlog.read_text():
                break
            time.sleep(0.1)
        else:
            pytest.fail("no pause started within 45 s")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    run_dir = next(tmp_path.glob("*/latest")).resolve()
    rid = run_id(run_dir)
    assert fc_namespaces(rid), "the killed run should have left its namespaces"
    r = run_fencecheck("teardown", "--run", rid, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not fc_namespaces(rid)
    assert not processes_matching(str(tmp_path))  # workers, store: all gone
    assert not run_processes_alive(run_dir)  # redis-server too, found by its recorded pid


def test_a_run_the_test_gives_up_on_is_stopped_and_torn_down(tmp_path: Path) -> None:
    # tests run `fencecheck run` through run_fencecheck: a timeout must not leave the run's
    # namespaces and redis-server behind, as subprocess.run's SIGKILL of the child alone did
    with pytest.raises(subprocess.TimeoutExpired):
        run_fencecheck("run", "--store", str(tmp_path), "--time-limit", "60", "--seed", "3",
                       timeout=8)
    run_dir = next(tmp_path.glob("*/latest")).resolve()
    assert not fc_namespaces(run_id(run_dir))
    assert not processes_matching(str(tmp_path))
    assert not run_processes_alive(run_dir)
    assert (run_dir / "history.jsonl").exists()  # and what was recorded is kept
