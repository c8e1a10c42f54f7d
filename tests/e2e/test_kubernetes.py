"""The `kubernetes` backend (kube-apiservers over etcd) and its `kubernetes-python` Lease client,
end to end through `fencecheck run` (network namespaces, short runs, fixed seeds): a paused leader
acting on an unfenced resource is caught; fenced by the Lease's resourceVersion, pauses,
partitions and kills of API servers find nothing and leave nothing behind; bad combinations are
refused before anything starts (exit 3). The sharded nightly's Kubernetes manifests
(examples/k8s/) pass a server-side dry run on this API server, and on the same server the
client's grants, renewals, releases and takeovers follow the library's rules.

kube-apiserver is built by scripts/build-clients.sh (the README's test command runs it): a missing
build fails these tests rather than skipping them. Cost: about 2.5 minutes on a loaded 2-core
machine (runs of 20, 15 and 12 s, each with about 10 s of cluster start-up; one API server for
the dry runs and the client's own tests; six refusals).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fencecheck.checker.history import load_ops
from fencecheck.clusters.services import kube_build
from fencecheck.clusters.services.kube_apiserver import KubeApiserverService
from fencecheck.workloads.base import DefiniteFailure
from fencecheck.workloads.clients.kube_lease import KubernetesPythonClient
from tests.backends import loopback_nodes, net
from tests.conftest import REPO, at_once, processes_matching, run_fencecheck
from tests.e2e.test_run_backends import DAMAGE, kinds, must_find, run
from tests.e2e.test_third_party import found_or_retry

pytestmark = [pytest.mark.netns]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "k8s"
# A 3 s Lease (the library refuses less than 2 s; 3 s gives it client-go's proportions).
LEADER = ("--workload", "leader", "--backend", "kubernetes", "--client", "kubernetes-python",
          "--lease-ms", "3000", "--concurrency", "3")


@pytest.fixture(autouse=True)
def built() -> None:
    try:
        kube_build.binary()
    except kube_build.NotBuilt as e:
        pytest.fail(str(e))  # the README's test command builds it: not a skip


# One API server per run where the test is about the library, not the cluster (a pause of a
# client): three kube-apiservers and etcd members a run were the suite's dearest processes in
# CPU (docs/test-suite-cpu.md). The fenced twin under partitions and the kill test keep three.
UNFENCED_PAUSE = (*LEADER, "--nodes", "1", "--nemesis", "pause", "--fencing", "off",
                  "--time-limit", "20")


@pytest.mark.usefixtures("no_leftovers")
def test_kubernetes_python_paused_unfenced_is_caught_and_fenced_by_resource_version_is_not(
        tmp_path: Path) -> None:
    # Unfenced: the paused leader's Lease expires, another candidate takes it, the old leader
    # wakes and acts on its stale term. Fenced (beside it, as its twin): nothing gets through.
    unfenced, (code, results) = at_once(
        lambda: run(tmp_path, "k8s-pause-1", *UNFENCED_PAUSE, "--seed", "1"),
        lambda: run(tmp_path, "k8s-fenced", *LEADER, "--fencing", "on", "--nemesis",
                    "pause,partition", "--time-limit", "15", "--seed", "1"))
    assert code == 0, kinds(results)
    assert results["checks"]["fencing"].get("skipped") is None  # the tokens were judged
    ops = load_ops(tmp_path / "k8s-fenced" / "latest" / "history.jsonl")
    grants = [o for o in ops if o.f == "acquire" and o.ok]
    assert len(grants) > 1 and all(isinstance(o.get("token"), int) for o in grants)
    found_or_retry(tmp_path, "k8s-pause", DAMAGE - {"double-grant"}, unfenced, *UNFENCED_PAUSE)


# Sections of 30 x 400 ms: the holder paused after its grant wakes with work left, and the
# library's renew loop, paused with it, gives up a retry and a renew_deadline (2.1 s) later.
NOTICED = ("--backend", "kubernetes", "--nodes", "1", "--client", "kubernetes-python",
           "--lease-ms", "3000", "--concurrency", "3", "--nemesis", "pause", "--fencing", "off",
           "--writes", "30", "--think-ms", "400", "--time-limit", "20",
           "--client-opt", "notices=work")


@pytest.mark.usefixtures("no_leftovers")
def test_kubernetes_python_tells_a_paused_holder_and_a_careless_one_writes_after(
        tmp_path: Path) -> None:
    # The library's onstopped_leading (its own renew loop kept for the grant, workloads/clients/
    # kube_keeper.py) is recorded as a lost-lock notice; with notices=work the holder goes on
    # writing after it: write-after-notice.
    found = must_find(tmp_path, "k8s-noticed", {"write-after-notice"}, *NOTICED, seeds=(1, 2))
    assert "write-after-notice" in found
    runs = sorted(tmp_path.glob("k8s-noticed-*/latest"))
    ops = load_ops(runs[-1] / "history.jsonl")
    notices = [o for o in ops if o.f == "notice" and o.ok]
    assert notices and {o.get("reason") for o in notices} == {"onstopped_leading"}
    assert all(isinstance(o.get("token"), int) for o in notices)


@pytest.mark.usefixtures("no_leftovers")
def test_killed_api_servers_are_restarted_and_leave_nothing_behind(tmp_path: Path) -> None:
    code, results = run(tmp_path, "k8s-kill", *LEADER, "--fencing", "on", "--nemesis", "kill",
                        "--time-limit", "12", "--seed", "1")
    assert code == 0, kinds(results)
    run_dir = (tmp_path / "k8s-kill" / "latest").resolve()
    ops = load_ops(run_dir / "history.jsonl")
    assert any(o.f == "start-kill" and o.ok for o in ops), "no API server was killed"
    assert any(o.f == "acquire" and o.ok for o in ops)
    # Every API server and etcd member of the run is gone (their argv names the run's files).
    assert not processes_matching(str(run_dir)), processes_matching(str(run_dir))


@pytest.mark.parametrize(("args", "says"), [
    (("--nemesis", "clock"), "clock nemesis cannot skew kube-apiserver"),
    (("--runtime", "docker"), "does not run under --runtime docker"),
    (("--client", "etcd"), "does not drive backend 'kubernetes'"),
    # settings the library refuses: no renew deadline fits between 1 s and 1.2 retry periods
    (("--lease-ms", "1000"), "lease_duration must be greater than renew_deadline"),
    (("--client-opt", "lease_duration=2", "--lease-ms", "3000"), "shorter than the run's lease"),
])
def test_bad_combinations_are_refused(tmp_path: Path, args: tuple[str, ...], says: str) -> None:
    code, results = run(tmp_path, "k8s-bad", "--backend", "kubernetes", *args)
    assert code == 3 and says in results["stderr"], results


def test_a_run_without_the_built_server_says_how_to_build_it(tmp_path: Path) -> None:
    r = run_fencecheck("run", "--store", str(tmp_path), "--backend", "kubernetes", timeout=60,
                       env={**os.environ,
                            "FENCECHECK_CLIENT_CACHE": str(tmp_path / "empty-cache")})
    assert r.returncode == 3, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert kube_build.BUILD_HINT in r.stderr and "not built" in r.stderr


# --- the nightly's manifests, dry-run on a real API server ---------------------------------

@pytest.fixture(scope="module")
def apiserver() -> Iterator[KubeApiserverService]:
    svc = KubeApiserverService(1)
    with tempfile.TemporaryDirectory(prefix="fc-k8s-") as d:
        try:
            svc.setup(loopback_nodes("k", net(47), 1), Path(d))
            yield svc
        finally:
            svc.teardown()


def _client(svc: KubeApiserverService) -> Any:
    from kubernetes import client

    opts = svc.client_options()
    conf = client.Configuration()
    conf.host = f"https://{svc.endpoints()[0]}"
    conf.ssl_ca_cert = opts["k8s_ca_file"]
    conf.api_key = {"authorization": f"Bearer {opts['k8s_token']}"}
    return client.ApiClient(conf)


def test_the_nightly_manifests_pass_a_server_side_dry_run(
        apiserver: KubeApiserverService) -> None:
    from kubernetes import client, utils

    api = _client(apiserver)
    # The Jobs are namespaced: apply them in a namespace of their own (created for real; a dry
    # run cannot create into a namespace that does not exist).
    ns = "fencecheck-nightly"
    client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata={"name": ns}))
    made = []
    for name in ("nightly/nightly-job.yaml", "merge/merge-job.yaml"):
        made += utils.create_from_yaml(api, str(EXAMPLES / name), namespace=ns, dry_run="All")
    got = {(o.kind, o.metadata.name) for objs in made for o in objs}
    assert got == {("PersistentVolumeClaim", "fencecheck-results"),
                   ("Job", "fencecheck-nightly"), ("Job", "fencecheck-nightly-merge")}
    job = next(o for objs in made for o in objs if o.metadata.name == "fencecheck-nightly")
    assert job.spec.completion_mode == "Indexed" and job.spec.completions == 4
    # dry run: nothing was stored
    assert client.BatchV1Api(api).list_namespaced_job(ns).items == []


def test_the_dry_run_rejects_a_broken_job(apiserver: KubeApiserverService) -> None:
    from kubernetes import client, utils

    api = _client(apiserver)
    # The nightly's per-index retry limit without Indexed completion: the server, not a YAML
    # parser, knows that they go together.
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "broken"},
           "spec": {"completionMode": "NonIndexed", "completions": 4, "backoffLimitPerIndex": 1,
                    "template": {"spec": {"restartPolicy": "Never",
                                          "containers": [{"name": "c", "image": "x"}]}}}}
    with pytest.raises(utils.FailToCreateError) as e:
        utils.create_from_dict(api, job, namespace="default", dry_run="All")
    assert "backoffLimitPerIndex" in str(e.value)
    assert client.BatchV1Api(api).list_namespaced_job("default").items == []


# --- the kubernetes-python client against the same API server ------------------------------

def _lease_client(svc: KubeApiserverService, worker: int) -> KubernetesPythonClient:
    return KubernetesPythonClient({"endpoints": svc.endpoints(), "worker": worker,
                                   "op_timeout_s": 2.0, **svc.client_options()})


def test_lease_client_grants_one_holder_at_a_time_with_growing_resource_versions(
        apiserver: KubeApiserverService) -> None:
    a, b = _lease_client(apiserver, 0), _lease_client(apiserver, 1)
    try:
        g = a.acquire("lock-t", 2000, 2.0)
        assert isinstance(g.token, int) and g.attempt_ns is not None
        with pytest.raises(DefiniteFailure, match="held"):
            b.acquire("lock-t", 2000, 0)  # held, and not yet seen unchanged for 2 s
        assert a.renew(g, 2000).token == g.token  # a renew keeps the grant's token
        with pytest.raises(DefiniteFailure, match="not-owner"):
            b.release(dataclasses.replace(g, handle=b._candidate("lock-t", 2000)))
        a.release(g)
        g2 = b.acquire("lock-t", 2000, 0)  # released: taken at once, by a later write
        assert g2.token is not None and g2.token > g.token
        with pytest.raises(DefiniteFailure, match="not-leader"):
            a.renew(g, 2000)
        b.release(g2)
    finally:
        a.close()
        b.close()


# A holder in its own process, so SIGSTOP pauses it and the library's renew loop kept for its
# grant (workloads/clients/kube_keeper.py), as a GC pause would.
TOLD = """
import json, sys, time
from fencecheck.workloads.clients.kube_lease import KubernetesPythonClient
c = KubernetesPythonClient(json.loads(sys.argv[1]))
c.on_notice(lambda lock, token, reason: print(json.dumps([lock, token, reason]), flush=True))
g = c.acquire("lock-n", 2000, 5.0)
print(json.dumps(g.token), flush=True)
time.sleep(60)
"""


def test_lease_client_passes_on_the_librarys_onstopped_leading_after_a_pause(
        apiserver: KubeApiserverService) -> None:
    opts = {"endpoints": apiserver.endpoints(), "worker": 0, "op_timeout_s": 2.0,
            **apiserver.client_options()}
    p = subprocess.Popen([sys.executable, "-c", TOLD, json.dumps(opts)], stdout=subprocess.PIPE,
                         text=True, cwd=REPO)
    b = _lease_client(apiserver, 1)
    try:
        assert p.stdout is not None
        token = json.loads(p.stdout.readline())
        p.send_signal(signal.SIGSTOP)  # its renew loop stops with it: the Lease runs out
        g = b.acquire("lock-n", 2000, 10.0)
        p.send_signal(signal.SIGCONT)
        # on waking, the library's loop finds another holder and gives up after renew_deadline
        assert json.loads(p.stdout.readline()) == ["lock-n", token, "onstopped_leading"]
        b.release(g)
    finally:
        p.send_signal(signal.SIGCONT)
        p.kill()
        p.wait(10)
        b.close()


def test_lease_client_takes_an_expired_lease_only_after_its_duration(
        apiserver: KubeApiserverService) -> None:
    a, b = _lease_client(apiserver, 0), _lease_client(apiserver, 1)
    try:
        g = a.acquire("lock-e", 2000, 2.0)  # never renewed nor released: a paused holder
        t = time.monotonic()
        g2 = b.acquire("lock-e", 2000, 6.0)
        # the library waits a whole lease_duration from its own first sight of the record
        assert time.monotonic() - t >= 2.0
        assert g2.token is not None and g.token is not None and g2.token > g.token
    finally:
        a.close()
        b.close()
