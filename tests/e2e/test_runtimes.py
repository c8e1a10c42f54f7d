"""End to end on the docker and ssh runtimes: the same `fencecheck run` as on netns finds the
unfenced Redis under pauses (exit 1) and passes fenced etcd under partitions (exit 0); nothing is
left behind, also after SIGINT mid-run; ssh refuses an unknown host key unless opted out. And
the lock services (redis 1, etcd 3, zookeeper 3) come up unchanged on both runtimes."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fencecheck.clusters.services.etcd import EtcdService
from fencecheck.clusters.services.redis import RedisService
from fencecheck.clusters.services.zookeeper import ZookeeperService
from tests.clusters.test_docker import ensure_node_image, left_by
from tests.clusters.test_ssh import SshdHosts, sshd_hosts
from tests.conftest import fencecheck_argv, run_fencecheck

DAMAGE = {"stale-write-accepted", "interleaved-writes", "lost-update"}
UNFENCED_REDIS = ("--fencing", "off", "--nemesis", "pause", "--pause-target", "holder",
                  "--time-limit", "10", "--lease-ms", "1000", "--seed", "1")
FENCED_ETCD = ("--backend", "etcd", "--fencing", "on", "--nemesis", "partition",
               "--time-limit", "10", "--lease-ms", "2000", "--seed", "1")


def run(store: Path, *args: str, timeout: float = 180) -> tuple[int, dict[str, Any], Path, str]:
    r = run_fencecheck("run", "--store", str(store), *args, timeout=timeout)
    assert r.returncode in (0, 1, 2), r.stdout + r.stderr
    runs = [p.resolve() for p in store.glob("*/latest")]
    assert len(runs) == 1
    results = json.loads((runs[0] / "results.json").read_text())
    return r.returncode, results, runs[0], r.stdout + r.stderr


def kinds(results: dict[str, Any]) -> set[str]:
    return {v["kind"] for c in results["checks"].values() for v in c["violations"]}


def run_id_of(run_dir: Path) -> str:
    rid = json.loads((run_dir / "test.json").read_text())["run_id"]
    assert isinstance(rid, str)
    return rid


def accepted_writes(run_dir: Path) -> int:
    n = 0
    for line in (run_dir / "history.jsonl").read_text().splitlines():
        op = json.loads(line)
        n += op["f"] == "write" and op["type"] == "ok"
    return n


# --- docker -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def docker_image() -> str:
    return ensure_node_image()


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_docker_unfenced_redis_with_pauses_is_caught(docker_image: str, tmp_path: Path) -> None:
    code, results, run_dir, out = run(tmp_path, "--runtime", "docker",
                                      *UNFENCED_REDIS)
    assert code == 1, out
    assert kinds(results) & DAMAGE, results
    assert (run_dir / "nodes" / "n1" / "redis.log").stat().st_size > 0
    assert left_by(run_id_of(run_dir)) == []


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_docker_fenced_etcd_under_partitions_is_valid(docker_image: str, tmp_path: Path) -> None:
    code, _, run_dir, out = run(tmp_path, "--runtime", "docker",
                                *FENCED_ETCD)
    assert code == 0, out
    history = (run_dir / "history.jsonl").read_text()
    assert '"start-partition"' in history
    assert accepted_writes(run_dir) > 0  # the run did work, not just wait
    assert left_by(run_id_of(run_dir)) == []


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_docker_sigint_mid_run_leaves_nothing(docker_image: str, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        fencecheck_argv("run", "--store", str(tmp_path), "--runtime", "docker",
                        "--nemesis", "pause,partition", "--time-limit", "60",
                        "--seed", "3"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        run_dir = _wait_for_events(tmp_path, proc)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert left_by(run_id_of(run_dir)) == []
    assert (run_dir / "history.jsonl").exists()


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_docker_killed_controller_is_cleaned_from_its_ledger(docker_image: str,
                                                             tmp_path: Path) -> None:
    import fencecheck.clusters.runtimes.docker  # noqa: F401  (registers the undo of docker records)
    from fencecheck.clusters.cleaner import teardown_run

    proc = subprocess.Popen(
        fencecheck_argv("run", "--store", str(tmp_path), "--runtime", "docker",
                        "--time-limit", "60"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        run_dir = _wait_for_events(tmp_path, proc)
    finally:
        proc.kill()  # SIGKILL: no unwinding at all
        proc.wait()
    rid = run_id_of(run_dir)
    assert left_by(rid) != []
    teardown_run(rid)
    assert left_by(rid) == []


def _wait_for_events(store: Path, proc: subprocess.Popen[bytes]) -> Path:
    """The run directory, once a worker has recorded an event (the run is doing work)."""
    deadline = time.monotonic() + 60
    events: list[Path] = []
    while not any(p.stat().st_size for p in events):
        assert time.monotonic() < deadline, "no worker event within 60 s"
        assert proc.poll() is None
        time.sleep(0.2)
        events = list(store.glob("*/*/nodes/c*/events.jsonl"))
    return events[0].parents[2]


# --- ssh --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sshd4(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdHosts]:
    yield from sshd_hosts(tmp_path_factory.mktemp("sshd"), 4)


def ssh_args(hosts: SshdHosts, *extra: str) -> tuple[str, ...]:
    return ("--runtime", "ssh", "--hosts", ",".join(hosts.addresses), "--ssh-user", "root",
            "--ssh-key", str(hosts.key), "--known-hosts", str(hosts.known_hosts), *extra)


def no_processes_under(path: Path) -> list[str]:
    out = subprocess.run(["ps", "-ww", "-eo", "pid=,stat=,args="], capture_output=True,
                         text=True).stdout.splitlines()
    return [x for x in out if str(path) in x and " Z" not in x and "ps -ww" not in x]


@pytest.mark.ssh
def test_ssh_unfenced_redis_with_pauses_is_caught(sshd4: SshdHosts, tmp_path: Path) -> None:
    code, results, run_dir, out = run(tmp_path, *ssh_args(sshd4, *UNFENCED_REDIS))
    assert code == 1, out
    assert kinds(results) & DAMAGE, results
    assert (run_dir / "nodes" / "n1" / "redis.log").stat().st_size > 0
    assert no_processes_under(tmp_path) == []


@pytest.mark.ssh
def test_ssh_fenced_etcd_under_partitions_is_valid(sshd4: SshdHosts, tmp_path: Path) -> None:
    code, _, run_dir, out = run(tmp_path, *ssh_args(sshd4, *FENCED_ETCD))
    assert code == 0, out
    ops = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    done = [(e["f"], e["type"], e.get("error")) for e in ops
            if e["process"] == "nemesis" and e["type"] != "invoke"]
    # Every start and stop took effect: a client cut off from a host must not cut the
    # controller's SSH session to it (it shares the clients' address), or the fault times out.
    assert done and all(t == "ok" for _, t, _ in done), done
    assert ("start-partition", "ok", None) in done
    assert accepted_writes(run_dir) > 0
    assert no_processes_under(tmp_path) == []
    for ns in sshd4.names:  # our chain is gone from every host
        chains = subprocess.run(["ip", "netns", "exec", ns, "iptables", "-S"],
                                capture_output=True, text=True).stdout
        assert f"FC-{run_id_of(run_dir)}" not in chains


@pytest.mark.ssh
def test_ssh_unknown_host_key_is_refused_with_a_clear_message(sshd4: SshdHosts,
                                                             tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    args = ["run", "--store", str(tmp_path / "store"), "--runtime", "ssh", "--hosts",
            ",".join(sshd4.addresses), "--ssh-key", str(sshd4.key), "--known-hosts", str(empty),
            "--time-limit", "2"]
    r = run_fencecheck(*args, timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    text = " ".join((r.stdout + r.stderr).split())
    assert sshd4.addresses[0] in text and "--ssh-accept-unknown" in text, text
    assert "Traceback" not in text


# --- lock services, unchanged, on both runtimes ---------------------------------------------

SERVICES: dict[str, tuple[Any, int]] = {
    "redis": (RedisService, 1), "etcd": (EtcdService, 3), "zookeeper": (ZookeeperService, 3),
}


def _reachable(endpoint: str, netns: str | None) -> bool:
    host, port = endpoint.rsplit(":", 1)
    if netns is None:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    code = "import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 2)"
    argv = ["ip", "netns", "exec", netns, "python3", "-c", code, host, port]
    return subprocess.run(argv, capture_output=True).returncode == 0


@pytest.mark.parametrize("backend", list(SERVICES))
@pytest.mark.docker
@pytest.mark.timeout(900)
def test_service_on_docker(backend: str, docker_image: str, tmp_path: Path) -> None:
    from fencecheck.clusters.runtimes.docker import DockerRuntime

    cls, n = SERVICES[backend]
    rid = secrets.token_hex(3)
    rt = DockerRuntime(rid, tmp_path, image=docker_image)
    service = cls(ledger=rt.ledger)
    try:
        cluster = rt.setup([f"n{i + 1}" for i in range(n)], ["c1"])
        service.setup(dict(cluster.servers), tmp_path)
        for ep in service.endpoints():
            assert _reachable(ep, f"fc-{rid}-c1"), ep
    finally:
        service.teardown()
        rt.teardown()
    assert left_by(rid) == []


@pytest.mark.parametrize("backend", list(SERVICES))
@pytest.mark.ssh
def test_service_on_ssh(backend: str, sshd4: SshdHosts, tmp_path: Path) -> None:
    cls, n = SERVICES[backend]
    rt = sshd4.runtime(secrets.token_hex(3), tmp_path)
    service = cls(ledger=rt.ledger)
    try:
        cluster = rt.setup([f"n{i + 1}" for i in range(n)], ["c1"])
        service.setup(dict(cluster.servers), tmp_path)
        for ep in service.endpoints():
            assert _reachable(ep, None), ep
    finally:
        service.teardown()
        rt.teardown()
    assert no_processes_under(tmp_path) == []
    assert os.path.isdir(tmp_path / "nodes" / "n1")
