"""The sharded nightly on fencecheck's one-node Kubernetes cluster, end to end (issue 30's
must-shows): the small matrix benchmarks/k8s_job.toml (two must-find, two must-pass rows) run

  1. unsharded on the host (`fencecheck matrix`, sequentially), timed;
  2. as a 3-shard Indexed Job (examples/k8s/local/nightly, with this matrix and 3 shards) on a
     cluster brought up from nothing (`LocalKube`, cached builds; the Job's image built if
     needed and imported), with shard 1's pod SIGKILLed in the middle of its run: the Job
     controller runs index 1 again, the Job completes, and the killed attempt left nothing on
     the node (clusters/kube/podtrace.py); then the merge Job (examples/k8s/local/merge)
     completes, and its comparison and JUnit agree with the host's (verdicts, kinds per row);
  3. again, with shard 2's pod killed on both of its attempts: the Job fails, and the merge
     Job fails naming the missing shard (`shard 2/3 missing`);
  4. the cluster taken down: nothing of it is left on the host.

Must run as root with dockerd running (the Job's image is built by it) and the builds made
(`fencecheck build kube-apiserver kube-node`). Prints a Markdown table of the figures and exits
non-zero if a must-show failed.

    .venv/bin/python benchmarks/bench_k8s_job.py [--keep DIR] [--ups N]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fencecheck.clusters.base import ClusterError  # noqa: E402
from fencecheck.clusters.kube import images, sweep  # noqa: E402
from fencecheck.clusters.kube.cluster import LocalKube  # noqa: E402
from fencecheck.clusters.kube.podtrace import PodTrace  # noqa: E402
from fencecheck.clusters.runtimes.docker_host import docker_client  # noqa: E402
from fencecheck.fleet.job_image import ensure_job_image  # noqa: E402

MATRIX = "benchmarks/k8s_job.toml"
SHARDS = 3
JOB, MERGE = "fencecheck-nightly", "fencecheck-nightly-merge"
OVERLAY = """\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: {ns}
resources:
  - {base}
patches:
  - target: {{kind: Job}}
    patch: |-
      - op: replace
        path: /spec/template/spec/volumes/0/hostPath/path
        value: {results}
      - op: test
        path: /spec/template/spec/containers/0/env/0/name
        value: MATRIX
      - op: replace
        path: /spec/template/spec/containers/0/env/0/value
        value: {matrix}
"""
# Three shards side by side on two cores: the example's 2-CPU request would run them one at a
# time (the scheduler is right to), so the benchmark asks for less.
SHARD_PATCH = """\
  - target: {{kind: Job, name: {job}}}
    patch: |-
      - op: replace
        path: /spec/completions
        value: {n}
      - op: replace
        path: /spec/parallelism
        value: {n}
      - op: test
        path: /spec/template/spec/containers/0/env/1/name
        value: SHARDS
      - op: replace
        path: /spec/template/spec/containers/0/env/1/value
        value: "{n}"
      - op: replace
        path: /spec/template/spec/containers/0/resources/requests
        value: {{cpu: 500m, memory: 1Gi}}
"""


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def host_matrix(out: Path) -> float:
    t0 = time.monotonic()
    # This interpreter and this checkout (PYTHONPATH), as the Job's image has them: a worktree
    # without a .venv of its own, or a venv installed from another checkout, runs this code.
    r = subprocess.run([sys.executable, "-m", "fencecheck", "matrix", MATRIX, "--store",
                        str(out / "store"), "--out", str(out / "merged"), "--junit",
                        str(out / "junit.xml")], cwd=ROOT, capture_output=True, text=True,
                       env={"COLUMNS": "200", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                            "PYTHONPATH": str(ROOT)})
    if r.returncode not in (0, 1):
        raise SystemExit(f"host matrix exited {r.returncode}: {r.stderr[-2000:]}")
    return time.monotonic() - t0


def overlay(tmp: Path, name: str, ns: str, results: Path, shards: bool) -> Path:
    d = tmp / "overlays" / name
    d.mkdir(parents=True)
    # kustomize takes a base by a relative path only
    base = os.path.relpath(ROOT / "examples/k8s/local" / ("nightly" if shards else "merge"), d)
    text = OVERLAY.format(ns=ns, base=base, results=results, matrix=MATRIX)
    if shards:
        text += SHARD_PATCH.format(job=JOB, n=SHARDS)
    (d / "kustomization.yaml").write_text(text)
    return d


def apply(kube: LocalKube, d: Path) -> None:
    kube.kubectl("apply", "-k", str(d))


def job_state(kube: LocalKube, ns: str, name: str) -> str | None:
    job = kube.get(f"/apis/batch/v1/namespaces/{ns}/jobs/{name}") or {}
    for c in job.get("status", {}).get("conditions", []):
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return str(c["type"])
    return None


def wait_job(kube: LocalKube, ns: str, name: str, timeout_s: float = 1800) -> str:
    deadline = time.monotonic() + timeout_s
    while (state := job_state(kube, ns, name)) is None:
        if time.monotonic() > deadline:
            raise SystemExit(f"job {ns}/{name} not finished after {timeout_s} s")
        time.sleep(2)
    return state


def pods(kube: LocalKube, ns: str, index: int) -> list[dict[str, Any]]:
    sel = f"batch.kubernetes.io/job-completion-index={index}"
    got = kube.get(f"/api/v1/namespaces/{ns}/pods?labelSelector={sel}") or {}
    return list(got.get("items", []))


def running_pod(kube: LocalKube, ns: str, index: int, seen: set[str],
                timeout_s: float = 600) -> dict[str, Any]:
    """Wait for a pod of `index` not in `seen` whose container runs."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for p in pods(kube, ns, index):
            sts = p.get("status", {}).get("containerStatuses", [])
            if p["metadata"]["uid"] not in seen and sts and "running" in sts[0].get("state", {}):
                return p
        time.sleep(1)
    events = kube.kubectl("get", "events", "-n", ns, check=False).stdout
    raise ClusterError(f"no new running pod of index {index} in {timeout_s:.0f} s: "
                       f"{events[-1500:]}")


def sandbox_of(kube: LocalKube, pod: dict[str, Any]) -> tuple[str, int]:
    """The pod's sandbox id and its container's init pid, from containerd."""
    lay = kube.layout
    assert lay is not None
    cid = pod["status"]["containerStatuses"][0]["containerID"].split("://")[1]
    info = json.loads(subprocess.run(images.ctr_argv(lay.containerd_sock, "containers", "info",
                                                     cid), capture_output=True, text=True,
                                     check=True).stdout)
    sandbox = info["Labels"]["io.kubernetes.sandbox.id"] if "io.kubernetes.sandbox.id" in \
        info.get("Labels", {}) else info["Spec"]["annotations"]["io.kubernetes.cri.sandbox-id"]
    tasks = subprocess.run(images.ctr_argv(lay.containerd_sock, "tasks", "ls"),
                           capture_output=True, text=True, check=True).stdout
    pid = next(int(line.split()[1]) for line in tasks.splitlines() if line.startswith(cid))
    return sandbox, pid


def kill_mid_run(kube: LocalKube, ns: str, index: int, results: Path, seen: set[str],
                 wait_run: bool) -> tuple[PodTrace, dict[str, Any]]:
    """SIGKILL the running pod of `index` (once one of its runs has started, if `wait_run`);
    returns what it held, taken just before."""
    pod = running_pod(kube, ns, index, seen)
    seen.add(pod["metadata"]["uid"])
    if wait_run:  # in the middle of its run: a run's history has events
        deadline = time.monotonic() + 600
        while not any(h.stat().st_size > 0 for h in
                      (results / f"shard-{index}").glob("*/*/history*.jsonl")):
            if time.monotonic() > deadline:
                raise SystemExit(f"shard {index} started no run in 600 s")
            time.sleep(1)
        time.sleep(3)
    sandbox, pid = sandbox_of(kube, pod)
    lay = kube.layout
    assert lay is not None
    trace = PodTrace.take(lay, pod["metadata"]["uid"], sandbox)
    log(f"killing {pod['metadata']['name']} (init pid {pid}; {len(trace.pids)} processes, "
        f"{len(trace.netns)} network namespaces, veth {trace.veth})")
    subprocess.run(["kill", "-KILL", str(pid)], check=True)
    return trace, pod


# ---- the merged outputs, compared ---------------------------------------------------------

CONFIG = ("backend", "client", "resource", "workload", "nemesis", "fencing")


def outcome(merged: Path, junit: Path) -> dict[str, Any]:
    """Per row of matrix.json: its verdicts; per configuration of compare.csv: its verdict and
    the violation kinds found; the JUnit cases and whether each failed."""
    from fencecheck.checker.registry import kind_names

    data = json.loads((merged / "matrix.json").read_text())
    rows = {r["row"]: (r["expect"], r["met"], sorted(x["verdict"] for x in r["runs"]))
            for r in data["rows"]}
    kinds = set(kind_names())
    with open(merged / "compare.csv", newline="") as fh:
        configs = {"/".join(r[k] for k in CONFIG): (r["verdict"], r["invalid_runs"],
                   sorted(k for k in kinds if k in r and float(r[k] or 0) > 0))
                   for r in csv.DictReader(fh)}
    cases = sorted((c.get("classname"), c.get("name"), c.find("failure") is not None)
                   for c in ET.parse(junit).getroot().iter("testcase"))
    return {"rows": rows, "configs": configs, "junit": cases}


def merge_logs(kube: LocalKube, ns: str) -> str:
    return kube.kubectl("logs", "-n", ns, f"job/{MERGE}", check=False).stdout


# ---- the parts ----------------------------------------------------------------------------

def job_killed_once(kube: LocalKube, tmp: Path, figures: dict[str, Any]) -> list[str]:
    """Part 2. Returns the failed must-shows."""
    ns, results = "bench-complete", tmp / "results-complete"
    kube.kubectl("create", "namespace", ns)
    t0 = time.monotonic()
    apply(kube, overlay(tmp, "complete", ns, results, True))
    seen: set[str] = set()
    trace, _ = kill_mid_run(kube, ns, 1, results, seen, wait_run=True)
    state = wait_job(kube, ns, JOB)
    figures["job_s"] = time.monotonic() - t0
    failed = []
    job = kube.get(f"/apis/batch/v1/namespaces/{ns}/jobs/{JOB}") or {}
    st = job.get("status", {})
    figures["job_status"] = {k: st.get(k) for k in ("succeeded", "failed", "completedIndexes",
                                                     "failedIndexes")}
    attempts = len(pods(kube, ns, 1))
    if state != "Complete" or attempts < 2:
        failed.append(f"job with one killed pod: {state}, index 1 ran {attempts} time(s)")
    lay = kube.layout
    assert lay is not None
    deadline = time.monotonic() + 120  # the kubelet cleans a dead pod up within seconds
    while (left := trace.left(lay)) and time.monotonic() < deadline:
        time.sleep(2)
    figures["killed_left"] = left
    if left:
        failed.append("the killed attempt left: " + "; ".join(left))
    t1 = time.monotonic()
    apply(kube, overlay(tmp, "complete-merge", ns, results, False))
    mstate = wait_job(kube, ns, MERGE, 600)
    figures["merge_s"] = time.monotonic() - t1
    if mstate != "Complete":
        failed.append(f"merge: {mstate}: {merge_logs(kube, ns)[-1000:]}")
        return failed
    host = outcome(tmp / "host" / "merged", tmp / "host" / "junit.xml")
    job_out = outcome(results / "merged", results / "junit.xml")
    figures["host_outcome"], figures["job_outcome"] = host, job_out
    for what in ("rows", "configs", "junit"):
        if host[what] != job_out[what]:
            failed.append(f"{what} differ: host {host[what]} / job {job_out[what]}")
    return failed


def job_missing_shard(kube: LocalKube, tmp: Path, figures: dict[str, Any]) -> list[str]:
    """Part 3: shard 2 killed on both attempts; the merge must fail naming it."""
    ns, results = "bench-missing", tmp / "results-missing"
    kube.kubectl("create", "namespace", ns)
    apply(kube, overlay(tmp, "missing", ns, results, True))
    seen: set[str] = set()
    for _ in range(2):  # backoffLimitPerIndex: 1, so two attempts
        kill_mid_run(kube, ns, 2, results, seen, wait_run=False)
    state = wait_job(kube, ns, JOB)
    job = kube.get(f"/apis/batch/v1/namespaces/{ns}/jobs/{JOB}") or {}
    figures["missing_job"] = {"state": state,
                              "failedIndexes": job.get("status", {}).get("failedIndexes")}
    apply(kube, overlay(tmp, "missing-merge", ns, results, False))
    mstate = wait_job(kube, ns, MERGE, 600)
    said = merge_logs(kube, ns)
    figures["missing_merge"] = {"state": mstate, "said": said.strip().splitlines()[-1:]}
    failed = []
    if state != "Failed" or job.get("status", {}).get("failedIndexes") != "2":
        failed.append(f"job with shard 2 killed twice: {state}, {figures['missing_job']}")
    if mstate != "Failed" or f"shard 2/{SHARDS} missing" not in said:
        failed.append(f"merge with shard 2 missing: {mstate}: {said[-500:]}")
    return failed


def cluster_left(rec: dict[str, Any], netns: str, host_veth: str) -> list[str]:
    # The kernel destroys a deleted namespace, and the veth in it, asynchronously: wait a little.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and subprocess.run(
            ["ip", "link", "show", host_veth], capture_output=True).returncode == 0:
        time.sleep(1)
    left = sweep.leftovers(rec)
    if Path(f"/run/netns/{netns}").exists():
        left.append(f"netns {netns}")
    if subprocess.run(["ip", "link", "show", host_veth], capture_output=True).returncode == 0:
        left.append(f"veth {host_veth}")
    return left


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, help="keep the results here")
    ap.add_argument("--ups", type=int, default=1, help="also time N more empty ups and downs")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fc-bench-k8s-"))
    figures: dict[str, Any] = {}
    failed: list[str] = []
    client = docker_client()
    t = time.monotonic()
    tag = ensure_job_image(client)
    figures["image"], figures["image_build_s"] = tag, time.monotonic() - t
    log(f"image {tag} ({figures['image_build_s']:.0f} s); the matrix on the host")
    figures["host_matrix_s"] = host_matrix(tmp / "host")
    kube = LocalKube()
    stop = lambda *_: (_ for _ in ()).throw(KeyboardInterrupt())  # noqa: E731
    signal.signal(signal.SIGTERM, stop)
    try:
        kube.up()
        figures["ready_s"] = kube.timings["ready_s"]
        lay = kube.layout
        assert lay is not None
        rec = sweep.record(lay.dir, lay.cgroup_root, lay.containerd_sock,
                           f"fc-kube-{lay.run}")
        log(f"cluster {lay.run} ready in {figures['ready_s']:.1f} s; importing {tag}")
        figures["image_import_s"] = images.import_docker_image(client, tag, lay.containerd_sock)
        images.tag(lay.containerd_sock, tag, images.LOCAL_JOB_IMAGE)
        failed += job_killed_once(kube, tmp, figures)
        failed += job_missing_shard(kube, tmp, figures)
    except (ClusterError, KeyboardInterrupt) as e:
        failed.append(f"stopped: {e!r}")
    finally:
        if args.keep:
            shutil.copytree(tmp, args.keep, dirs_exist_ok=True, symlinks=True)
            if kube.layout is not None:
                shutil.copytree(kube.layout.logs, args.keep / "cluster-logs", dirs_exist_ok=True)
        lay = kube.layout
        kube.down()
        figures["down_s"] = kube.timings.get("down_s")
        if lay is not None:
            rec = sweep.record(lay.dir, lay.cgroup_root, lay.containerd_sock,
                               f"fc-kube-{lay.run}")
            figures["cluster_left"] = cluster_left(rec, lay.netns, lay.host_veth)
            if figures["cluster_left"]:
                failed.append("the cluster left: " + "; ".join(figures["cluster_left"]))
    ups = []
    for _ in range(args.ups - 1):
        k = LocalKube()
        with k:
            pass
        ups.append(k.timings["ready_s"])
    figures["more_ready_s"] = ups
    figures["failed"] = failed
    print(json.dumps(figures, indent=2, default=str))
    print(f"\n| what | seconds |\n|---|---|\n| cluster ready from nothing (cached builds) | "
          f"{figures.get('ready_s', float('nan')):.1f} |\n"
          f"| Job image import | {figures.get('image_import_s', float('nan')):.1f} |\n"
          f"| 3-shard Job, one pod killed and rerun | {figures.get('job_s', float('nan')):.1f} |\n"
          f"| merge Job | {figures.get('merge_s', float('nan')):.1f} |\n"
          f"| same matrix, sequentially on the host | {figures['host_matrix_s']:.1f} |\n"
          f"| cluster down | {figures.get('down_s') or float('nan'):.1f} |")
    shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
