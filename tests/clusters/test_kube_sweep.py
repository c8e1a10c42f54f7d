"""The one-node cluster's sweep (fencecheck/clusters/kube/sweep.py), on real cgroups, mounts and
processes of a cluster that never ran (no kubelet needed): a `kube-node` record in a run's
ledger is what `fencecheck teardown --run ID` removes after a crash, exactly: the processes in
the cluster's cgroup root and its shims, the mounts under its folder, its cgroups in every
hierarchy and its CNI results, and its folder but the logs; nothing of another cluster."""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fencecheck.clusters.cleaner import Ledger, claim_run_id, teardown_run
from fencecheck.clusters.kube import sweep
from tests.conftest import run_fencecheck

pytestmark = pytest.mark.netns  # root: cgroups, mounts


def _cluster(base: Path, run: str) -> dict[str, str]:
    folder = base / run
    (folder / "logs").mkdir(parents=True)
    (folder / "logs" / "kubelet.log").write_text("kept\n")
    (folder / "containerd" / "root").mkdir(parents=True)
    return sweep.record(folder, f"/fencecheck-kube-{run}", folder / "containerd.sock",
                        f"fc-kube-{run}")


def _make(rec: dict[str, str]) -> None:
    """What a crashed cluster leaves: a container process in a nested cgroup of its root, a
    "shim" naming its socket, a tmpfs mount (a pod volume) under its folder, a CNI result."""
    for top in (p for p in sweep.CGROUP_FS.iterdir() if p.is_dir()):
        (top / rec["cgroup_root"].strip("/") / "kubepods" / "pod1").mkdir(parents=True)
    subprocess.Popen(["python3", "-c", "import time; time.sleep(300)", "-address", rec["sock"]])
    child = subprocess.Popen(["sleep", "300"])
    pod = sweep.CGROUP_FS / "pids" / rec["cgroup_root"].strip("/") / "kubepods" / "pod1"
    (pod / "cgroup.procs").write_text(str(child.pid))
    vol = Path(rec["dir"]) / "kubelet" / "pods" / "u1" / "volumes"
    vol.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(vol)], check=True)
    sweep.CNI_RESULTS.mkdir(parents=True, exist_ok=True)
    (sweep.CNI_RESULTS / f"{rec['cni_network']}-abc-eth0").write_text("{}")


@pytest.fixture
def two_clusters(tmp_path: Path) -> Iterator[tuple[dict[str, str], dict[str, str]]]:
    runs = ["k" + secrets.token_hex(2), "k" + secrets.token_hex(2)]
    recs = (_cluster(tmp_path, runs[0]), _cluster(tmp_path, runs[1]))
    yield recs
    for rec in recs:  # whatever a failed test left
        with contextlib.suppress(Exception):
            sweep.sweep(rec)


def test_teardown_of_a_crashed_cluster_removes_exactly_its_own(
        tmp_path: Path, two_clusters: tuple[dict[str, str], dict[str, str]]) -> None:
    mine, other = two_clusters
    index = tmp_path / "index"
    run = claim_run_id(index)
    ledger = Ledger(Path(mine["dir"]) / "ledger.jsonl", run, index)
    ledger.record(sweep.KIND, "fencecheck-x", **mine)
    _make(mine)
    _make(other)
    assert len(sweep.leftovers(mine)) >= 4
    removed = teardown_run(run, index)
    assert any("container process" in r for r in removed)
    assert sweep.leftovers(mine) == []
    assert not any(sweep.CGROUP_FS.glob(f"*{mine['cgroup_root']}"))
    assert sorted(p.name for p in Path(mine["dir"]).iterdir()) == ["ledger.jsonl", "logs"]
    assert (Path(mine["dir"]) / "logs" / "kubelet.log").read_text() == "kept\n"
    # the other cluster is untouched
    left = sweep.leftovers(other)
    assert any(x.startswith("mount ") for x in left) and any("cgroup" in x for x in left)
    sweep.sweep(other)
    assert sweep.leftovers(other) == []
    assert sweep.sweep(other) == []  # idempotent


def test_the_cli_teardown_knows_the_kube_node_kind(
        two_clusters: tuple[dict[str, str], dict[str, str]]) -> None:
    mine, _ = two_clusters
    run = claim_run_id()
    try:
        Ledger(Path(mine["dir"]) / "ledger.jsonl", run).record(sweep.KIND, "fencecheck-x", **mine)
        _make(mine)
        t0 = time.monotonic()
        r = run_fencecheck("teardown", "--run", run, timeout=120)
        assert r.returncode == 0, r.stderr
        assert "kube node fencecheck-x" in r.stdout
        assert sweep.leftovers(mine) == [] and time.monotonic() - t0 < 60
    finally:
        teardown_run(run)
    assert os.path.exists(mine["dir"])
