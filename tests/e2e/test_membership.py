"""The membership fault end to end (issue 28) through `fencecheck run`: three etcd members and
three ZooKeeper servers in network namespaces, a member removed right after a grant (the leader,
or one the seed names) and a fresh one added on its node, fenced by the service's token. Neither
finds anything and the granted tokens strictly increase; the history records every member that
left and came; the run replays (the leader of the moment, when the step removed the leader); a
SIGTERM mid-change heals and tears down; a backend without the capability is refused (exit 3).
Short runs, fixed seeds, side by side."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import at_once, fencecheck_argv, run_fencecheck, run_processes_alive
from tests.e2e.test_run_backends import kinds, run

pytestmark = [pytest.mark.netns, pytest.mark.usefixtures("no_leftovers")]

# Sections (3 writes x 300 ms) that outlast a removal; a change every 1-2 s after a grant. 20 s:
# at 12 s one run of the test command at load average 12 made a single grant (the test asks two).
MEMBERSHIP = ("--nemesis", "membership", "--fencing", "on", "--think-ms", "300",
              "--interval", "1,2", "--time-limit", "20", "--seed", "1")


def events(store: Path, name: str) -> list[dict[str, Any]]:
    run_dir = (store / name / "latest").resolve()
    return [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]


def granted_tokens(evs: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Each lock's granted tokens, in the order the grants completed."""
    out: dict[str, list[int]] = defaultdict(list)
    for e in sorted(evs, key=lambda e: e["time"]):
        if e["f"] == "acquire" and e["type"] == "ok":
            out[e["value"]["lock"]].append(e["value"]["token"])
    return out


def changes(evs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The completed removals and additions, in order."""
    done = [e for e in evs if e["process"] == "nemesis" and e["type"] == "ok"]
    return ([e["value"] for e in done if e["f"] == "start-membership"],
            [e["value"] for e in done if e["f"] == "stop-membership"])


def _fenced_and_unharmed(store: Path, name: str, code: int, results: dict[str, Any]) -> None:
    assert code == 0 and not kinds(results), (name, kinds(results))
    fencing = results["checks"]["fencing"]
    assert fencing["valid"] is True and fencing["grants_with_token"] >= 2, fencing
    evs = events(store, name)
    for lock, tokens in granted_tokens(evs).items():  # strictly increasing, grant by grant
        assert all(a < b for a, b in itertools.pairwise(tokens)), (lock, tokens)
    pairs = removals_and_their_additions(evs)
    assert pairs, f"{name}: no member was removed: {changes(evs)[0]}"
    for r, fresh in pairs:  # a fresh member (a new id) on the node that lost one, all back
        assert fresh is not None, f"{name}: {r['removed']} was not added back: {r}"
        assert fresh["member"] != r["member"], (r, fresh)
        assert fresh["members"] == ["n1", "n2", "n3"], fresh


def removals_and_their_additions(
        evs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """Each completed removal with the member added on its node after it (a node can lose its
    member more than once in a run: each removal pairs with the next addition there)."""
    done = sorted((e for e in evs if e["process"] == "nemesis" and e["type"] == "ok"),
                  key=lambda e: e["time"])
    out: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
    for i, e in enumerate(done):
        if e["f"] != "start-membership" or "removed" not in e["value"]:
            continue
        node = e["value"]["removed"]
        fresh = next((a["value"]["added"][node] for a in done[i + 1:]
                      if a["f"] == "stop-membership" and node in a["value"].get("added", {})),
                     None)
        out.append((e["value"], fresh))
    return out


def test_etcd_and_zookeeper_fenced_through_membership_changes_find_nothing(
        tmp_path: Path) -> None:
    (code_e, res_e), (code_z, res_z) = at_once(
        lambda: run(tmp_path, "etcd", "--backend", "etcd", *MEMBERSHIP),
        lambda: run(tmp_path, "zk", "--backend", "zookeeper", *MEMBERSHIP))
    _fenced_and_unharmed(tmp_path, "etcd", code_e, res_e)
    _fenced_and_unharmed(tmp_path, "zk", code_z, res_z)
    removed = changes(events(tmp_path, "etcd"))[0] + changes(events(tmp_path, "zk"))[0]
    assert any(r.get("was_leader") for r in removed), removed  # a leader was removed
    # Recorded by role (the leader then) or by name; the replay plays the same steps.
    run_dir = (tmp_path / "etcd" / "latest").resolve()
    steps = json.loads((run_dir / "schedule.json").read_text())["steps"]
    assert steps and all(s["fault"] == "membership" and s["waited"] for s in steps), steps
    assert all(s["role"] == ("primary" if s["value"]["node"] == "leader" else "as named")
               for s in steps), steps
    replay, sigterm = at_once(
        lambda: run_fencecheck("run", "--store", str(tmp_path / "replay"), "--replay",
                               str(run_dir), timeout=300),
        lambda: _sigterm_mid_change(tmp_path / "sigterm"))
    assert replay.returncode == 0, replay.stdout + replay.stderr
    again = next((tmp_path / "replay").glob("*/latest")).resolve()
    played = json.loads((again / "schedule.json").read_text())["steps"]
    assert [(s["value"], s["role"]) for s in played] == \
        [(s["value"], s["role"]) for s in steps][:len(played)] and played
    sigterm()


def _sigterm_mid_change(store: Path) -> Any:
    """A zookeeper run stopped by SIGTERM while a member is out; returns the check to run."""
    proc = subprocess.Popen(fencecheck_argv("run", "--store", str(store), "--backend",
                                            "zookeeper", *MEMBERSHIP[:-4], "--time-limit", "60"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            logs = list(store.glob("*/latest/nemesis.jsonl"))
            if logs and '"removed"' in logs[0].read_text():
                break
            time.sleep(0.1)
        else:
            pytest.fail("no member was removed within 90 s")
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()

    def check() -> None:
        assert proc.returncode == 128 + signal.SIGTERM and "Traceback" not in err, err
        run_dir = next(store.glob("*/latest")).resolve()
        assert not run_processes_alive(run_dir)
        log = (run_dir / "fencecheck.log").read_text()
        assert "membership: healed" in log, log[-3000:]

    return check


def test_a_backend_without_it_is_refused(tmp_path: Path) -> None:
    r = run_fencecheck("run", "--store", str(tmp_path), "--backend", "redis", "--nemesis",
                       "membership", "--time-limit", "5", timeout=60)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "membership: not supported by backend 'redis': it needs reconfigure" in r.stderr
    assert "Traceback" not in r.stderr
    assert not list(tmp_path.glob("*/2*")), "refused before anything was created"
