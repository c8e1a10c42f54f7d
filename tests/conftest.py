"""Shared test fixtures: what a test needs from the machine, and the check that a test left
nothing behind (no namespace, no SIGSTOPped process) of its own.

The suite runs side by side under pytest-xdist (scripts/test.sh): every check here looks at the
test's own runs only (the runs whose ledgers are in its tmp_path or its worker's temporary
folder), never at the whole machine, and `WORKER` gives each test process (each xdist worker, of
this session or another one beside it) loopback addresses of its own (tests/backends.py)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from fencecheck.clusters.cleaner import ENV_MARKER, RUN_INDEX, _start_time, read_records

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus"


_SLOTS = Path(tempfile.gettempdir()) / "fencecheck-test-slots"
_held: list[int] = []  # the slot's locked file, open for the life of this process


def _claim_slot() -> int:
    """A number 1..254 that no other test process on this machine holds, so that
    127.<slot>.x.y never meets another's: the xdist workers of one session, and every worker of
    a second pytest session beside it (two engineers, a CI run beside a benchmark). A slot is an
    flock on a file, so the kernel gives it back when the process ends, however it ends."""
    _SLOTS.mkdir(exist_ok=True)
    for slot in range(1, 255):
        fd = os.open(_SLOTS / str(slot), os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        _held.append(fd)
        return slot
    raise RuntimeError(f"every test slot in {_SLOTS} is held: 254 test processes at once?")


WORKER = _claim_slot()


def fencecheck_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "fencecheck", *args]


def run_cmd(argv: list[str], *, timeout: float, **popen: Any) -> subprocess.CompletedProcess[str]:
    """argv to completion, output captured as text, like `subprocess.run`, except when the test
    gives up on it (the timeout, pytest-timeout's interrupt, Ctrl-C): subprocess.run would SIGKILL
    the child alone, leaving a `fencecheck run`'s namespaces and servers behind. Here the child's
    process group gets SIGTERM, which a run answers by healing and tearing down; only a child
    still there a minute later is killed, and `fencecheck teardown --all` then removes what runs
    with a dead owner left."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **popen)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            group = group_pids(proc.pid)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            for run in runs_owned_by(group):  # only this child's runs, never another test's
                subprocess.run(fencecheck_argv("teardown", "--run", run), capture_output=True,
                               timeout=120)
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _stat_fields(path: str) -> list[str] | None:
    """A /proc stat file's fields after the command name (state, ppid, pgrp, ...); None if gone."""
    try:
        with open(path) as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _stats() -> dict[int, list[str]]:
    """Every live pid's /proc/PID/stat fields after the command name (state, ppid, pgrp, ...)."""
    out: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat_fields(f"/proc/{entry}/stat")) is not None:
            out[int(entry)] = fields
    return out


def all_threads_stopped(pid: int, timeout_s: float = 5.0) -> bool:
    """Whether every thread of `pid` is in the stopped state within `timeout_s`: SIGSTOP is
    delivered to each thread as it next runs, so kill(2) returns before a busy one has stopped."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states = [fields[0] for task in os.listdir(f"/proc/{pid}/task")
                  if (fields := _stat_fields(f"/proc/{pid}/task/{task}/stat")) is not None]
        if states and all(s in ("T", "t") for s in states):
            return True
        time.sleep(0.01)
    return False


def group_pids(pgid: int) -> set[int]:
    """The pids of process group pgid (a `fencecheck run` child and what it started in it)."""
    return {pid for pid, fields in _stats().items() if int(fields[2]) == pgid}


def _index_ledgers() -> dict[str, list[Path]]:
    """Run id -> ledger paths, from the machine's run index (/run/fencecheck/runs)."""
    out: dict[str, list[Path]] = {}
    if RUN_INDEX.is_dir():
        for entry in RUN_INDEX.iterdir():
            with contextlib.suppress(OSError):
                out[entry.name] = [Path(p) for p in entry.read_text().splitlines() if p]
    return out


def runs_owned_by(pids: set[int]) -> list[str]:
    """Runs in the run index whose controller (the ledger's owner record) was one of pids."""
    return sorted(run for run, ledgers in _index_ledgers().items()
                  if any(r.get("kind") == "owner" and r.get("pid") in pids
                         for path in ledgers for r in read_records(path)))


def runs_under(root: Path, *, files: bool = True) -> set[str]:
    """The run ids whose ledgers lie under root: in the run index (a run still registered)
    and, with `files`, as ledger files there (a run that unregistered or never registered)."""
    root = root.resolve()
    out = {run for run, ledgers in _index_ledgers().items()
           if any(p.resolve().is_relative_to(root) for p in ledgers)}
    if files:
        for ledger in root.glob("**/ledger.jsonl"):
            out.update(str(r["run"]) for r in read_records(ledger)[:1] if "run" in r)
    return out


def run_processes_alive(run_dir: Path) -> list[str]:
    """Processes the run recorded in its ledger (servers, workers, the fenced store, proxies)
    that are still alive: same pid and start time. The per-run form of "is anything left",
    since redis-server's title names only its address, which every netns run shares."""
    return [f"{r['name']} on {r.get('node')} (pid {r['pid']})"
            for r in read_records(run_dir / "ledger.jsonl")
            if r.get("kind") == "process" and r.get("start") is not None
            and _start_time(int(r["pid"])) == r["start"]]


def run_fencecheck(*args: str, timeout: float, **popen: Any) -> subprocess.CompletedProcess[str]:
    """`fencecheck ARGS` through `run_cmd`."""
    return run_cmd(fencecheck_argv(*args), timeout=timeout, **popen)


def run_directory(stdout: str) -> Path:
    """The run folder a `fencecheck run` printed (its "run directory: PATH" line)."""
    return Path(stdout.split("run directory:")[1].split()[0])


def at_once(*calls: Callable[[], Any]) -> list[Any]:
    """Every call at the same time (threads: each usually waits on a `fencecheck run` process);
    their results in order. All have ended when it returns, so a test leaves nothing running,
    and the first exception is raised then. The test command's time is mostly runs waiting out
    their time limits: twin runs side by side halve it."""
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(c) for c in calls]
        return [f.result() for f in futures]


def netns_available() -> str | None:
    """None if network namespaces can be made here, else the reason."""
    if os.geteuid() != 0:
        return "needs root"
    for b in ("ip", "iptables"):
        if not shutil.which(b) and not os.path.exists(f"/usr/sbin/{b}"):
            return f"{b} not installed (bash scripts/setup.sh)"
    return None


def fc_namespaces(run_id: str = "") -> list[str]:
    """fencecheck's namespaces (of one run, if given)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    prefix = f"fc-{run_id}-" if run_id else "fc-"
    return [line.split()[0] for line in out.splitlines() if line.startswith(prefix)]


def fc_mounts(run_id: str = "") -> list[tuple[str, Path]]:
    """(source, mountpoint) of the lose-unsynced FUSE mounts (of one run, if given), dead ones
    included: a file system process killed without an unmount leaves its mount in the table."""
    from fencecheck.clusters.faults.unsynced_ctl import mounts

    return mounts(f"fencecheck-{run_id}-" if run_id else "fencecheck-")


def _ps() -> list[str]:
    argv = ["ps", "-ww", "-eo", "pid=,stat=,args="]  # -ww: full command lines, never cut
    return subprocess.run(argv, capture_output=True, text=True).stdout.splitlines()


def stopped_processes(matching: str = "") -> list[str]:
    """SIGSTOPped processes (whose command line contains `matching`, if given)."""
    return [line.strip() for line in _ps()
            if line.split()[1].startswith("T") and matching in line]


def processes_matching(text: str) -> list[str]:
    """Live processes whose command line contains text (e.g. a test's tmp_path)."""
    return [line.strip() for line in _ps()
            if text in line and not line.split()[1].startswith("Z") and "ps -ww" not in line]


# xdist groups (scripts/test.sh runs `--dist loadgroup`): the tests of one group run one after
# another on one worker, so the heavy ones never start together and modules whose servers take
# seconds to start keep them in one worker. Everything else is spread test by test. By module
# path (relative to the repository), in one place.
GROUPS: dict[str, str] = {
    # three kube-apiservers and a three-member etcd per run, two runs side by side
    "tests/e2e/test_kubernetes.py": "kube",
    "tests/e2e/test_client_go.py": "kube",
    # JVM clusters and JVM client programs (five JVMs a run, twins side by side)
    "tests/e2e/test_third_party_go_jvm.py": "jvm",
    "tests/e2e/test_third_party.py": "jvm",
    # a matrix run three times over (the shards) beside the unsharded one: the suite's slowest
    # test (about 150 s), in a group of its own so that it is not in series with the JVM ones
    "tests/e2e/test_shard.py": "shard",
    # Quartz and Spring Integration (three JVMs a run, up to three runs side by side): a group
    # of their own, beside the jvm group rather than after it on its worker
    "tests/e2e/test_jvm_schedulers.py": "jvm2",
    # module-scoped ensembles: one start per module rather than one per worker
    "tests/clusters/test_zookeeper.py": "zookeeper",
    "tests/workloads/test_zk_client.py": "zookeeper",
    "tests/clusters/test_etcd.py": "etcd",
    "tests/workloads/test_etcd_client.py": "etcd",
    "tests/workloads/test_etcd_resource.py": "etcd",
    "tests/clusters/test_nats.py": "nats",
    "tests/workloads/test_nats_client.py": "nats",
    "tests/clusters/test_consul.py": "consul",
    "tests/workloads/test_consul_client.py": "consul",
    "tests/e2e/test_consul.py": "consul",
    "tests/clusters/test_mariadb.py": "mariadb",
    "tests/workloads/test_mariadb_client.py": "mariadb",
    "tests/clusters/test_galera.py": "galera",
    "tests/workloads/test_galera_client.py": "galera",
    "tests/workloads/test_leader_clients.py": "leader",
    "tests/clusters/test_postgres.py": "postgres",
    "tests/workloads/test_pg_resource.py": "postgres",
    "tests/workloads/test_pylib_clients.py": "postgres",
    # one sdist, wheel and venv for the module's tests
    "tests/fencecheck/test_install.py": "install",
    # three Hazelcast member JVMs per cluster or run (and JVM clients): one worker for them all
    "tests/clusters/test_hazelcast.py": "hazelcast",
    "tests/workloads/test_hazelcast_client.py": "hazelcast",
    "tests/e2e/test_hazelcast.py": "hazelcast",
    # membership changes on etcd and ZooKeeper and power loss on ZooKeeper and NATS (issue 28):
    # twin runs side by side, and the loopback ensembles the membership fault changes
    "tests/e2e/test_membership.py": "member",
    "tests/e2e/test_power_loss.py": "powerloss",
    "tests/clusters/test_membership.py": "member",
    # the shipped findings' replays (issue 29; one a run, every one with FC_REPLAY_FINDING=all):
    # up to three kube-apiservers a replay, so one after another on one worker
    "tests/e2e/test_findings_replay.py": "replay",
    # the docker runtime: container starts are serialized in dockerd anyway
    "tests/clusters/test_docker.py": "docker",
    "tests/e2e/test_runtimes.py": "docker",
}


def pytest_configure(config: pytest.Config) -> None:
    # The day's shipped finding to replay, fixed once in pytest's first process: xdist's workers
    # start after this with its environment, so all collect the same one (tests/e2e/replay_pick.py)
    if not hasattr(config, "workerinput"):
        from tests.e2e.replay_pick import fix_the_pick
        fix_the_pick()


@pytest.hookimpl(wrapper=True)  # a wrapper's first half runs before xdist's hook reads marks
def pytest_collection_modifyitems(config: pytest.Config,
                                  items: list[pytest.Item]) -> Generator[None, None, None]:
    for item in items:
        path = Path(str(item.path)).resolve()
        group = GROUPS.get(path.relative_to(REPO).as_posix()) if path.is_relative_to(REPO) else None
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    yield
    reason = netns_available()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"netns: {reason}")
    for item in items:
        if "netns" in item.keywords:
            item.add_marker(skip)


def _descendants() -> set[int]:
    """Pids below this process (servers a test started on loopback are its children)."""
    parent = {pid: int(fields[1]) for pid, fields in _stats().items()}
    out, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - out
        out |= frontier
    return out


def _netns_inodes(names: set[str]) -> set[tuple[int, int]]:
    out = set()
    for name in names:
        with contextlib.suppress(OSError):
            st = os.stat(f"/run/netns/{name}")
            out.add((st.st_dev, st.st_ino))
    return out


def _stopped_of(lines: set[str], runs: set[str], roots: list[Path]) -> list[str]:
    """Those of the stopped processes (ps lines) that belong to this test: below this process,
    in one of its runs' namespaces, recorded or marked by one of its runs, or naming one of
    its folders in their command line."""
    mine_ns = _netns_inodes({n for n in fc_namespaces() if n.split("-")[1] in runs})
    below = _descendants()
    recorded = {int(r["pid"]) for run, ledgers in _index_ledgers().items() if run in runs
                for path in ledgers for r in read_records(path) if r.get("kind") == "process"}
    out = []
    for line in lines:
        pid = int(line.split()[0])
        ns = None
        with contextlib.suppress(OSError):
            st = os.stat(f"/proc/{pid}/ns/net")
            ns = (st.st_dev, st.st_ino)
        env = b""
        with contextlib.suppress(OSError), open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read()
        if (pid in below or ns in mine_ns or pid in recorded
                or any(f"{ENV_MARKER}={r}".encode() in env for r in runs)
                or any(str(root) in line for root in roots)):
            out.append(line)
    return sorted(out)



def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_for_late_builds(timeout_s: float = 2400.0) -> None:
    """scripts/test.sh builds the programs of many CPU minutes (`fencecheck build --late only`:
    consul) beside the tests, not before them: a test that needs one calls this first, and waits
    while that build runs (FC_LATE_BUILDS_PID). Elsewhere, and once it has ended, at once."""
    pid = os.environ.get("FC_LATE_BUILDS_PID", "")
    deadline = time.monotonic() + timeout_s
    while pid.isdigit() and _alive(int(pid)) and time.monotonic() < deadline:
        time.sleep(2)

@pytest.fixture
def no_leftovers(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Fails the test if it leaves a namespace, a lose-unsynced FUSE mount or a SIGSTOPped
    process of its own behind: of a run whose ledger is in the test's tmp_path or in its xdist
    worker's temporary folder (the worker runs one test at a time), a mount below either
    folder, or a stopped process of such a run or below this process. What other workers'
    tests are doing at the same moment is not looked at."""
    base = tmp_path_factory.getbasetemp()
    before_ns = set(fc_namespaces())
    before_mounts = set(fc_mounts())
    before_stopped = set(stopped_processes())
    yield
    runs = runs_under(base, files=False) | runs_under(tmp_path)
    left_ns = {n for n in set(fc_namespaces()) - before_ns if n.split("-")[1] in runs}
    roots = [tmp_path.resolve(), base.resolve()]
    left_mounts = {m for m in set(fc_mounts()) - before_mounts
                   if m[0].split("-")[1] in runs or any(m[1].is_relative_to(r) for r in roots)}
    left_stopped = _stopped_of(set(stopped_processes()) - before_stopped, runs, roots)
    assert not left_ns, f"namespaces left behind: {sorted(left_ns)}"
    assert not left_mounts, f"FUSE mounts left behind: {sorted(left_mounts)}"
    assert not left_stopped, f"stopped processes left behind: {left_stopped}"
