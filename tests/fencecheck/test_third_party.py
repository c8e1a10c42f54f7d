"""The three shipped third-party lock libraries, end to end through `fencecheck run` (real
servers in network namespaces, short runs, fixed seeds): what DESIGN.md says must be found, and
what must not. `node-redlock` (npm redlock + ioredis) on `redlock`; `curator` (Apache Curator's
InterProcessMutex) on `zookeeper`; `etcd-go` (etcd's Go concurrency.Mutex) on `etcd`.

Built by scripts/build-clients.sh (the README's test command runs it). A must-find test may try
more seeds, since fault timing is chance; a must-not test never retries.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fencecheck.workloads.clients.build import NotBuilt, command
from tests.conftest import run_fencecheck
from tests.fencecheck.test_run_backends import DAMAGE, kinds, must_find, run

pytestmark = [pytest.mark.netns, pytest.mark.usefixtures("no_leftovers")]


@pytest.fixture(autouse=True)
def built(request: pytest.FixtureRequest) -> None:
    for name in ("node-redlock", "curator", "etcd-go"):
        if name in request.node.name:
            try:
                command(name)
            except NotBuilt as e:
                pytest.fail(str(e))  # the README's test command builds them: not a skip


def test_node_redlock_double_grants_under_a_majority_clock_jump(tmp_path: Path) -> None:
    must_find(tmp_path, "node-redlock", {"double-grant"}, "--backend", "redlock", "--client",
              "node-redlock", "--nemesis", "clock", "--think-ms", "100", "--time-limit", "20")


def test_node_redlock_without_faults_is_valid(tmp_path: Path) -> None:
    code, results = run(tmp_path, "node-redlock", "--backend", "redlock", "--client",
                        "node-redlock", "--nemesis", "none", "--time-limit", "8")
    assert code == 0, kinds(results)
    assert results["stats"]["ops_by_f"]["acquire"]["ok"] > 0


def test_curator_unfenced_with_pauses_is_caught(tmp_path: Path) -> None:
    # A JVM per worker starts slowly on a loaded machine: 3 workers, 30 s.
    must_find(tmp_path, "curator-pause", DAMAGE - {"double-grant"}, "--backend", "zookeeper",
              "--client", "curator", "--nemesis", "pause", "--fencing", "off",
              "--concurrency", "3", "--time-limit", "30", "--lease-ms", "2000")


def test_curator_unfenced_after_a_client_partition_past_the_session_is_caught(
        tmp_path: Path) -> None:
    # Critical sections of 12 x 400 ms so that the holder, cut off from ZooKeeper for longer
    # than its 2 s session, is still writing when its lock node is gone and another holds it.
    must_find(tmp_path, "curator-partition", DAMAGE - {"double-grant"}, "--backend",
              "zookeeper", "--client", "curator", "--nemesis", "partition", "--fencing", "off",
              "--fault-duration", "4,6", "--think-ms", "400", "--writes", "12",
              "--concurrency", "3", "--time-limit", "30", "--lease-ms", "2000",
              seeds=(1, 3, 4))


def test_curator_fenced_survives_pauses_and_partitions(tmp_path: Path) -> None:
    code, results = run(tmp_path, "curator-fenced", "--backend", "zookeeper", "--client",
                        "curator", "--fencing", "on", "--nemesis", "pause,partition",
                        "--concurrency", "3", "--time-limit", "30", "--lease-ms", "2000",
                        "--seed", "1")
    assert code == 0, kinds(results)
    assert results["checks"]["fencing"].get("skipped") is None  # czxid tokens were judged


def test_etcd_go_unfenced_with_pauses_is_caught(tmp_path: Path) -> None:
    must_find(tmp_path, "etcd-go-pause", DAMAGE - {"double-grant"}, "--backend", "etcd",
              "--client", "etcd-go", "--nemesis", "pause", "--fencing", "off",
              "--time-limit", "20", "--lease-ms", "2000")


def test_etcd_go_fenced_survives_pause_partition_kill(tmp_path: Path) -> None:
    code, results = run(tmp_path, "etcd-go-fenced", "--backend", "etcd", "--client", "etcd-go",
                        "--fencing", "on", "--nemesis", "pause,partition,kill",
                        "--time-limit", "20", "--lease-ms", "2000", "--seed", "1")
    assert code == 0, kinds(results)
    assert "token-regression" not in kinds(results)
    assert results["checks"]["fencing"].get("skipped") is None


def test_a_client_that_is_not_built_says_how_to_build_it(tmp_path: Path) -> None:
    r = run_fencecheck("run", "--store", str(tmp_path / "store"), "--backend", "etcd", "--client",
                       "etcd-go", timeout=60,
                       env={**os.environ, "FENCECHECK_CLIENT_CACHE": str(tmp_path / "empty")})
    assert r.returncode == 3, r.stdout + r.stderr
    assert "bash scripts/build-clients.sh etcd-go" in r.stderr.replace("\n", "")
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").iterdir())
