"""client-go's Lease leader election (`client-go`, workloads/clients/go/client-go) on the
`kubernetes` backend through `fencecheck run` (real API servers in network namespaces, short
runs, fixed seeds): a paused holder on an unfenced resource is caught, fenced by the Lease's
resourceVersion nothing is; and the `client-clock` fault, which moves the workers' wall clocks,
leaves client-go (monotonic time) alone but not the wall-clock judge of kubernetes-python.

Built by scripts/build-clients.sh (client-go and kube-apiserver; the README's test command runs
it). A must-find test may try a second seed, since fault timing is chance; a must-not test never
retries.
"""

from __future__ import annotations

import random
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from fencecheck.checker.history import load_ops
from fencecheck.clusters.base import ClusterError
from fencecheck.descriptors.base import FaultDescriptor
from fencecheck.nemesis.faults.base import EnvFor, FaultContext, ScheduleView
from fencecheck.run.workers import worker_env
from fencecheck.workloads.clients.build import NotBuilt, command
from tests.conftest import at_once
from tests.e2e.test_run_backends import DAMAGE, kinds, run
from tests.e2e.test_third_party import found_or_retry

# One API server and one etcd member per run: the Lease's semantics are one API server's (every
# replica serves the same etcd), and three per run made these the suite's dearest tests in CPU
# (docs/test-suite-cpu.md); the three-node cluster runs in tests/e2e/test_kubernetes.py.
K8S = ("--backend", "kubernetes", "--lease-ms", "2000", "--nodes", "1")


@pytest.fixture
def built() -> None:
    from fencecheck.clusters.services.kube_build import binary

    try:
        command("client-go")
        binary()
    except (NotBuilt, ClusterError) as e:
        pytest.fail(str(e))  # the README's test command builds them: not a skip


def grants(run_dir: Path) -> list[Any]:
    ops = load_ops(run_dir / "history.jsonl")
    return [o for o in ops if o.f == "acquire" and o.ok]


CLIENT_GO_PAUSE = (*K8S, "--client", "client-go", "--nemesis", "pause", "--time-limit", "20")
NOTICED = ("--fencing", "off", "--writes", "8", "--think-ms", "300", "--client-opt", "notices=work")


@pytest.mark.netns
@pytest.mark.usefixtures("no_leftovers", "built")
def test_client_go_paused_unfenced_is_caught_and_fenced_by_resource_version_stops_stale_writes(
        tmp_path: Path) -> None:
    # Unfenced: the paused process's elector stops renewing; another candidate takes the Lease
    # once its LeaseDuration has passed, and the old holder writes on waking. The fenced twin
    # runs beside it.
    unfenced, (code, results) = at_once(
        # the elector's OnStoppedLeading is recorded as a lost-lock notice (notices=work: the
        # holder keeps working after it, as before); sections of 8 writes 300 ms apart, so that
        # a woken holder still holds the lock when the elector gives up, about 1.3 s later
        lambda: run(tmp_path, "client-go-pause-1", *CLIENT_GO_PAUSE, *NOTICED, "--seed", "1"),
        lambda: run(tmp_path, "client-go-fenced", *CLIENT_GO_PAUSE, "--fencing", "on",
                    "--seed", "1"))
    # The fence holds: no stale write, no lost update, tokens only grow. The lock itself may
    # double-grant: a paused holder that wakes and gives up (ReleaseOnCancel) writes an empty
    # holder over the Lease its successor now holds, because client-go's release trusts the
    # holder it last observed, not the one it has just read; the next candidate then takes the
    # Lease while the successor still leads.
    assert code in (0, 1) and kinds(results) <= {"double-grant"}, kinds(results)
    assert results["checks"]["fencing"].get("skipped") is None  # the tokens were judged
    assert results["stats"]["writes_rejected_by_fence"] > 0  # a paused holder was stopped
    ok = grants(tmp_path / "client-go-fenced" / "latest")
    assert len(ok) > 3 and all(isinstance(o.get("token"), int) for o in ok)
    for a in ok:  # a grant that completed before another was asked for has the lower token
        for b in ok:
            if a.end_time is not None and a.end_time < b.time:
                assert a.get("token") < b.get("token"), (a, b)
    found_or_retry(tmp_path, "client-go-pause", DAMAGE - {"double-grant"}, unfenced,
                   *CLIENT_GO_PAUSE, *NOTICED)
    notices = [o for p in tmp_path.glob("client-go-pause-*/latest")
               for o in load_ops(p / "history.jsonl") if o.f == "notice" and o.ok]
    assert notices and {o.get("reason") for o in notices} == {"OnStoppedLeading"}
    assert all(isinstance(o.get("token"), int) for o in notices)


@pytest.mark.netns
@pytest.mark.usefixtures("no_leftovers", "built")
def test_a_client_clock_bump_misleads_wall_clock_leases_but_not_client_go(
        tmp_path: Path) -> None:
    # The waiting candidates' clocks leap past the lease. kubernetes-python measures the
    # holder's lease from when it saw the Lease change, by time.time(): it takes the Lease from
    # a live holder. client-go measures it on Go's monotonic clock, which the shim cannot move.
    # Sections of about 2 s in a 3 s lease: a candidate polls (every 1 s) more than once while
    # one holder holds, so it sees the same Lease after its clock has leapt.
    clock = ("--backend", "kubernetes", "--nodes", "1", "--lease-ms", "3000", "--nemesis",
             "client-clock", "--fencing", "off", "--think-ms", "600", "--time-limit", "15")
    (code, results), python = at_once(
        lambda: run(tmp_path, "client-go-clock", *clock, "--client", "client-go", "--seed", "1"),
        lambda: run(tmp_path, "python-clock-1", *clock, "--client", "kubernetes-python",
                    "--seed", "1"))
    assert code == 0, kinds(results)
    ops = load_ops(tmp_path / "client-go-clock" / "latest" / "history.jsonl")
    assert any(o.f == "start-client-clock" and o.ok for o in ops), "no clock was moved"
    found_or_retry(tmp_path, "python-clock", {"double-grant"}, python, *clock, "--client",
                   "kubernetes-python")
    # kubernetes-python's acquires say which clock the library judged the Lease by; a Lease
    # taken from a live holder shows the library's time.time() had seen the record unchanged
    # for longer than the monotonic clock had
    taken = [o for p in tmp_path.glob("python-clock-*/latest") for o in grants(p)]
    assert taken and all(o.get("evidence", {}).get("time_source") == "time.time()"
                         for o in taken)
    over = [o.get("evidence")["took_over"] for o in taken
            if "took_over" in o.get("evidence", {})]
    assert any(t["wall_elapsed_ms"] >= t["lease_duration_s"] * 1000 > t["monotonic_elapsed_ms"]
               for t in over), over


class _EnvFault:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.name = "fake"

    def worker_env(self, stack: ExitStack) -> EnvFor:
        return lambda node: {**self.env, "NODE": node}

    def bind(self, ctx: FaultContext) -> None: ...
    def hold_range_s(self) -> tuple[float, float]: return (1.0, 1.0)
    def targets(self, rng: random.Random, view: ScheduleView) -> Any: return None
    def start(self, value: Any) -> Any: return None
    def stop(self) -> Any: return None
    def heal(self) -> None: ...


def test_workers_get_the_env_of_faults_that_declare_worker_env() -> None:
    faults: dict[str, Any] = {"a": _EnvFault({"A": "1"}), "b": _EnvFault({"B": "2"})}
    declared = (FaultDescriptor("a", "x:A", worker_env=True), FaultDescriptor("b", "x:B"))
    with ExitStack() as stack:
        env_for = worker_env(declared, faults, stack)
    assert env_for("c1") == {"A": "1", "NODE": "c1"}  # b did not declare it: not asked


def test_a_fault_that_declares_worker_env_without_giving_it_is_refused() -> None:
    faults: dict[str, Any] = {"a": object()}
    with ExitStack() as stack, pytest.raises(ClusterError, match="fault a: declares worker_env"):
        worker_env((FaultDescriptor("a", "x:A", worker_env=True),), faults, stack)
