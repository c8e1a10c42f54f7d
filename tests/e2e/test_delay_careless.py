"""End to end through `fencecheck run`: the delay fault (a request held past its lease by the
client's proxy, then delivered) and the careless clients against the strict ones, on real Redis
and the fenced store in network namespaces. Short runs, fixed seeds."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    at_once,
    fc_namespaces,
    fencecheck_argv,
    processes_matching,
    run_fencecheck,
    runs_under,
)

pytestmark = [pytest.mark.netns, pytest.mark.usefixtures("no_leftovers")]

DAMAGE = {"stale-write-accepted", "interleaved-writes", "lost-update"}


def run(store: Path, *args: str, timeout: float = 180) -> tuple[int, dict[str, Any], Path]:
    r = run_fencecheck("run", "--store", str(store), *args, timeout=timeout)
    assert r.returncode in (0, 1, 2), r.stdout + r.stderr
    runs = [p.resolve() for p in store.glob("*/latest")]
    assert len(runs) == 1
    return r.returncode, json.loads((runs[0] / "results.json").read_text()), runs[0]


def violations(results: dict[str, Any]) -> list[dict[str, Any]]:
    return [v for c in results["checks"].values() for v in c["violations"]]


def kinds(results: dict[str, Any]) -> set[str]:
    return {v["kind"] for v in violations(results)}


def history(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]


DELAY = ("--nemesis", "delay", "--time-limit", "15", "--lease-ms", "1000", "--seed", "1")


def test_a_write_delayed_past_its_lease_is_accepted_by_an_unfenced_store(
        tmp_path: Path) -> None:
    code, results, run_dir = run(tmp_path, "--fencing", "off", *DELAY)
    assert code == 1, results
    assert "stale-write-accepted" in kinds(results), results
    events = history(run_dir)
    starts = [e for e in events if e["f"] == "start-delay" and e["type"] == "ok"]
    stops = [e for e in events if e["f"] == "stop-delay" and e["type"] == "ok"]
    assert starts and len(stops) == len(starts), "every delay is logged and released"
    assert all(s["value"]["held"] and s["value"]["path"] == "resource" for s in starts)
    assert sum(s["value"]["late_bytes"] for s in stops) > 0, "held requests were delivered late"
    # The proxies are gone with the run.
    assert not processes_matching(str(tmp_path))


def test_a_fenced_store_rejects_the_late_write(tmp_path: Path) -> None:
    code, results, run_dir = run(tmp_path, "--fencing", "on", *DELAY)
    assert code == 0, results
    assert results["stats"]["writes_rejected_by_fence"] > 0, results["stats"]
    assert any(e["f"] == "stop-delay" for e in history(run_dir))


def test_a_renewal_delayed_past_its_lease_on_the_service_path_is_harmless_when_fenced(
        tmp_path: Path) -> None:
    code, results, run_dir = run(tmp_path, "--nemesis", "delay-service", "--renew",
                                 "--fencing", "on", "--time-limit", "15", "--lease-ms", "1000",
                                 "--seed", "1")
    assert code == 0, results
    stops = [e for e in history(run_dir) if e["f"] == "stop-delay-service" and e["type"] == "ok"]
    assert stops and all(s["value"]["path"] == "service" for s in stops)
    assert sum(s["value"]["late_bytes"] for s in stops) > 0, "held requests were delivered late"


def test_a_sigint_mid_delay_releases_stops_the_proxies_and_keeps_the_history(
        tmp_path: Path) -> None:
    # Output to files, not pipes nobody reads while the test waits: a full pipe would block the
    # controller's progress line and with it the schedule.
    out_f, err_f = open(tmp_path / "out.txt", "w+"), open(tmp_path / "err.txt", "w+")  # noqa: SIM115
    proc = subprocess.Popen(fencecheck_argv("run", "--store", str(tmp_path / "store"),
                                            "--nemesis", "delay", "--time-limit", "60",
                                            "--lease-ms", "1000", "--seed", "2"),
                            stdout=out_f, stderr=err_f, text=True)
    run_dir: Path | None = None
    try:
        deadline = time.monotonic() + 120  # the workers' start and a first grant, under load
        while time.monotonic() < deadline:
            runs = list((tmp_path / "store").glob("*/latest"))
            nlog = runs[0] / "nemesis.jsonl" if runs else None
            if nlog and nlog.exists() and '"ok","f":"start-delay"' in nlog.read_text():
                run_dir = runs[0].resolve()
                break
            time.sleep(0.1)
        else:
            pytest.fail("no delay started within 120 s")
        assert processes_matching("fencecheck.clusters.faults.proxy --state " + str(run_dir))
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=90)
    finally:
        if proc.poll() is None:  # failed before the signal: leave nothing of this run behind
            proc.kill()
            proc.wait()
            for rid in runs_under(tmp_path):
                run_fencecheck("teardown", "--run", rid, timeout=120)
        out_f.seek(0)
        err_f.seek(0)
        out, err = out_f.read(), err_f.read()
        out_f.close()
        err_f.close()
    assert proc.returncode == 128 + signal.SIGINT, out + err
    assert "Traceback" not in err
    assert run_dir is not None
    assert not processes_matching(str(tmp_path)), "proxies, workers, store: all gone"
    assert not fc_namespaces(json.loads((run_dir / "test.json").read_text())["run_id"])
    # the heal released the hold before the proxies were stopped
    states = [json.loads(p.read_text()) for p in run_dir.glob("nodes/c*/proxy-resource.json")]
    assert states and all(st["held"] is False for st in states), states
    assert any(e["f"] == "start-delay" for e in history(run_dir))


def test_the_proxies_of_a_killed_run_are_removed_by_teardown(tmp_path: Path) -> None:
    proc = subprocess.Popen(fencecheck_argv("run", "--store", str(tmp_path), "--nemesis",
                                            "delay", "--time-limit", "60", "--lease-ms", "1000",
                                            "--seed", "3"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_dir: Path | None = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and run_dir is None:
            runs = list(tmp_path.glob("*/latest"))
            nlog = runs[0] / "nemesis.jsonl" if runs else None
            if nlog and nlog.exists() and '"ok","f":"start-delay"' in nlog.read_text():
                run_dir = runs[0].resolve()
            time.sleep(0.1)
    finally:
        proc.kill()  # SIGKILL: no cleanup of its own
        proc.wait()
        runs = list(tmp_path.glob("*/latest"))
        started = runs[0].resolve() if runs else None
        left = bool(started) and processes_matching(f"faults.proxy --state {started}")
        rid = json.loads((started / "test.json").read_text())["run_id"] if started else ""
        if rid:
            r = run_fencecheck("teardown", "--run", rid, timeout=120)
    assert run_dir is not None, "the run never started a delay"
    assert left, "the killed run's proxies should outlive it until teardown"
    assert r.returncode == 0, r.stdout + r.stderr
    assert not processes_matching(str(tmp_path))
    assert not fc_namespaces(rid)


CARELESS = ("--renew", "--nemesis", "pause", "--time-limit", "20", "--lease-ms", "1000",
            "--seed", "1")


def test_careless_release_and_renew_grant_the_lock_twice_where_the_strict_client_does_not(
        tmp_path: Path) -> None:
    (_, strict, _), (code, careless, run_dir) = at_once(
        lambda: run(tmp_path / "strict", "--client", "redis-setnx", "--fencing", "off", *CARELESS),
        lambda: run(tmp_path / "careless", "--client", "redis-setnx-careless", "--fencing", "off",
                    *CARELESS))
    assert "double-grant" not in kinds(strict), strict
    assert code == 1
    doubles = [v for v in violations(careless) if v["kind"] == "double-grant"]
    assert doubles, careless
    # Each names the careless step, from the evidence the careless ops recorded.
    named = ("'s release at", "'s renew at")
    assert all(any(s in v["explanation"] for s in named) and "without checking" in
               v["explanation"] for v in doubles), doubles
    assert any(e["f"] == "release" and e["type"] == "ok"
               and e["value"].get("deleted_token") not in (None, e["value"]["token"])
               for e in history(run_dir))


def test_fencing_still_rejects_every_stale_write_of_a_careless_client(tmp_path: Path) -> None:
    _, results, _ = run(tmp_path, "--client", "redis-setnx-careless", "--fencing", "on",
                        *CARELESS)
    assert not kinds(results) & DAMAGE, results
    assert results["stats"]["writes_rejected_by_fence"] > 0, results["stats"]



# --- the delay fault on the docker runtime (clients are namespaces on the containers' network) ---


@pytest.fixture(scope="module")
def docker_image() -> str:
    from tests.clusters.test_docker import ensure_node_image

    return ensure_node_image()


@pytest.mark.docker
@pytest.mark.timeout(900)
@pytest.mark.parametrize("fencing", ["off", "on"])
def test_delay_on_docker(docker_image: str, tmp_path: Path, fencing: str) -> None:
    from tests.clusters.test_docker import left_by

    code, results, run_dir = run(tmp_path, "--runtime", "docker",
                                 "--fencing", fencing, *DELAY, timeout=600)
    if fencing == "off":
        assert code == 1 and "stale-write-accepted" in kinds(results), results
    else:
        assert code == 0, results
        assert results["stats"]["writes_rejected_by_fence"] > 0, results["stats"]
    assert any(e["f"] == "stop-delay" and e["type"] == "ok" for e in history(run_dir))
    rid = json.loads((run_dir / "test.json").read_text())["run_id"]
    assert left_by(rid) == []


ETCD_CARELESS = ("--backend", "etcd", "--renew", "--nemesis", "pause", "--time-limit", "20",
                 "--lease-ms", "2000", "--seed", "1", "--fencing", "off")


def test_careless_etcd_grants_twice_where_the_strict_etcd_client_does_not(
        tmp_path: Path) -> None:
    (_, strict, _), (code, careless, _) = at_once(
        lambda: run(tmp_path / "strict", "--client", "etcd", *ETCD_CARELESS),
        lambda: run(tmp_path / "careless", "--client", "etcd-careless", *ETCD_CARELESS))
    assert "double-grant" not in kinds(strict), strict
    assert code == 1
    doubles = [v for v in violations(careless) if v["kind"] == "double-grant"]
    assert doubles, careless
    named = ("'s release at", "'s renew at")
    assert all(any(s in v["explanation"] for s in named) for v in doubles), doubles
