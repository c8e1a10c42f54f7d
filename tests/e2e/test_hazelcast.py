"""End to end on the Hazelcast backends through `fencecheck run` (3 member JVMs in network
namespaces, short runs, fixed seeds, twins side by side):
- `hazelcast` (CP Subsystem, 3 CP members), the Java client's FencedLock fenced by its fence
  under pause, partition and kill: nothing found, and the fences of each lock strictly increase;
- the Python client's FencedLock unfenced, holders paused past the CP session TTL: the damage is
  found;
- `hazelcast-unsafe` (no CP members) under partitions that split the members, each worker
  talking through its own member: two holders at once (double-grant), the 2017 Jepsen finding
  on today's FencedLock API;
- a run whose member jar is not built, or whose lease the session TTL cannot follow, is refused
  before it starts (exit 3).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

from fencecheck.clusters.services import hazelcast_build
from fencecheck.workloads.clients.build import NotBuilt, command
from tests.conftest import at_once, run_fencecheck
from tests.e2e.test_run_backends import DAMAGE, kinds, must_find, run

pytestmark = [pytest.mark.netns, pytest.mark.usefixtures("no_leftovers")]

CP = ("--backend", "hazelcast", "--lease-ms", "2000", "--time-limit", "15")
FENCED_FAULTS = (*CP, "--client", "hazelcast-java", "--fencing", "on",
                 "--nemesis", "pause,partition,kill", "--seed", "3")
UNFENCED_PAUSE = (*CP, "--client", "hazelcast", "--fencing", "off", "--nemesis", "pause")
# Partitions held 8-10 s: a member cut off leaves the others' cluster view after 4 s, and its
# side then serves the lock on its own (unsafe mode has no quorum).
UNSAFE_SPLIT = ("--backend", "hazelcast-unsafe", "--lease-ms", "2000", "--time-limit", "25",
                "--fencing", "off", "--nemesis", "partition", "--fault-duration", "8,10")


@pytest.fixture(autouse=True)
def built() -> None:
    try:
        hazelcast_build.jar()
        command("hazelcast-java")
    except (hazelcast_build.NotBuilt, NotBuilt) as e:
        pytest.fail(str(e))  # the README's test command builds them: not a skip


def granted_tokens(store: Path, name: str) -> dict[str, list[int]]:
    """Each lock's granted tokens, in the order the grants completed."""
    run_dir = (store / name / "latest").resolve()
    out: dict[str, list[int]] = defaultdict(list)
    for line in (run_dir / "history.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e.get("f") == "acquire" and e.get("type") == "ok":
            out[e["value"]["lock"]].append(e["value"]["token"])
    return out


def test_cp_fences_hold_under_every_fault_and_unfenced_pauses_are_caught(
        tmp_path: Path) -> None:
    (code_f, res_f), (code_u, res_u) = at_once(
        lambda: run(tmp_path, "cp-fenced", *FENCED_FAULTS),
        lambda: run(tmp_path, "cp-unfenced-1", "--seed", "1", *UNFENCED_PAUSE))
    assert code_f == 0, kinds(res_f)
    assert res_f["checks"]["fencing"].get("skipped") is None  # the fences were judged
    assert "token-regression" not in kinds(res_f)
    for lock, tokens in granted_tokens(tmp_path, "cp-fenced").items():
        assert len(tokens) > 3, (lock, tokens)
        assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens), (lock, tokens)
    if not (code_u == 1 and kinds(res_u) & DAMAGE):
        must_find(tmp_path, "cp-unfenced", DAMAGE, *UNFENCED_PAUSE, seeds=(2,))


def test_unsafe_mode_grants_one_lock_on_both_sides_of_a_split(tmp_path: Path) -> None:
    found = must_find(tmp_path, "unsafe-split", {"double-grant"}, *UNSAFE_SPLIT)
    assert "double-grant" in found


def test_unbuilt_jar_and_a_lease_under_the_ttl_step_are_refused(tmp_path: Path) -> None:
    unbuilt, short = at_once(
        lambda: run_fencecheck("run", "--store", str(tmp_path), "--backend", "hazelcast",
                               "--lease-ms", "2000", timeout=60,
                               env={**os.environ,
                                    "FENCECHECK_CLIENT_CACHE": str(tmp_path / "empty-cache")}),
        lambda: run_fencecheck("run", "--store", str(tmp_path), "--backend", "hazelcast",
                               "--lease-ms", "1000", "--time-limit", "5", timeout=120))
    for r in (unbuilt, short):
        assert r.returncode == 3, r.stdout + r.stderr
        assert "Traceback" not in r.stderr
    assert hazelcast_build.BUILD_HINT in unbuilt.stderr and "not built" in unbuilt.stderr
    assert "lease_ms must be more than 1000" in short.stderr
