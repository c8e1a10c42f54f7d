"""Power loss (lose-unsynced) on the backends beyond redis, redlock and etcd (issue 28), through
`fencecheck run`, each as a twin of runs side by side that differ in one durability setting,
both on one server and a journaling file system (`lose-unsynced-journal`: any fsync keeps the
names, as on ext4; under strict POSIX names both servers lose files they created and fsynced in
a directory they never fsynced, whatever the setting):

- NATS JetStream as shipped syncs its file store every 2 minutes: the server that lost what it
  had not synced comes back with KV revisions already granted, and grants them again
  (token-regression); with `sync_interval: always` the revisions keep increasing.
- ZooKeeper: with `forceSync=no` the restarted server has forgotten every transaction since
  its last sync and restarts at zxid 0; its clients, which saw more, are refused from then on
  (no violation: the lock goes unavailable); with `forceSync=yes` (ZooKeeper's default) every
  restart finds what was acknowledged.

The figures over ten seeds, PostgreSQL and three-server clusters are in
benchmarks/power_loss.toml and docs/findings/power-loss-and-membership.md. Short runs, fixed
seeds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fencecheck.clusters.services import nats_build
from tests.conftest import at_once
from tests.e2e.test_lose_unsynced import _missing
from tests.e2e.test_run_backends import kinds, run

pytestmark = [pytest.mark.netns, pytest.mark.usefixtures("no_leftovers"),
              pytest.mark.skipif(_missing() is not None, reason=str(_missing()))]


def events(store: Path, name: str) -> list[dict[str, Any]]:
    run_dir = (store / name / "latest").resolve()
    return [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]


def losses(evs: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """(time, what each node lost) of every completed power loss."""
    return [(e["time"], e["value"]["lost"]) for e in evs
            if e["f"].startswith("start-lose-unsynced") and e["type"] == "ok"]


def test_nats_as_shipped_grants_a_revision_twice_and_sync_always_does_not(
        tmp_path: Path) -> None:
    try:
        nats_build.binary()
    except nats_build.NotBuilt as e:
        pytest.fail(str(e))  # the README's test command builds it: not a skip
    common = ("--backend", "nats", "--nodes", "1", "--nemesis", "lose-unsynced-journal",
              "--fencing", "on", "--think-ms", "400", "--time-limit", "15", "--seed", "1")
    (code_d, res_d), (code_a, res_a) = at_once(
        lambda: run(tmp_path, "default", *common),
        lambda: run(tmp_path, "always", *common, "--backend-opt", "sync_interval=always"))
    # As shipped: the server comes back at the stream's last sync and hands out the KV
    # revisions that followed it again.
    assert code_d == 1 and "token-regression" in kinds(res_d), kinds(res_d)
    # sync_interval: always: every revision was on disk before it was granted.
    assert losses(events(tmp_path, "always")), "no power loss ran"
    assert code_a == 0 and not kinds(res_a), kinds(res_a)
    fencing = res_a["checks"]["fencing"]
    assert fencing["valid"] is True and fencing["grants_with_token"] >= 2, fencing


def test_zookeeper_alone_forgets_everything_without_forcesync_and_nothing_with_it(
        tmp_path: Path) -> None:
    # Faults 4-6 s apart: a restarted JVM loads its data before the next loss, under load too.
    common = ("--backend", "zookeeper", "--nodes", "1", "--nemesis", "lose-unsynced-journal",
              "--fencing", "on", "--think-ms", "400", "--interval", "4,6",
              "--time-limit", "15", "--seed", "1")
    (code_n, res_n), (code_y, res_y) = at_once(
        lambda: run(tmp_path, "no", *common, "--backend-opt", "forceSync=no"),
        lambda: run(tmp_path, "yes", *common))
    assert code_n == 0 and not kinds(res_n), kinds(res_n)
    assert code_y == 0 and not kinds(res_y), kinds(res_y)
    # forceSync=no: a loss took transactions and the server came back empty (zxid 0), as it
    # started; its clients, which had seen more, are refused (no violation: no service).
    lost = [lost["n1"]["bytes_dropped"] for _, lost in losses(events(tmp_path, "no"))]
    assert any(b > 0 for b in lost), lost
    assert _loads(tmp_path, "no").count("0x0") >= 2, _loads(tmp_path, "no")
    # forceSync=yes: every restart found what was acknowledged before it.
    assert losses(events(tmp_path, "yes")), "no power loss ran"
    assert _loads(tmp_path, "yes").count("0x0") == 1, _loads(tmp_path, "yes")


def _loads(store: Path, name: str) -> list[str]:
    """The highest zxid each start of the server loaded, in order (the first: the fresh one)."""
    log = (store / name / "latest").resolve() / "nodes" / "n1" / "zookeeper.log"
    return [line.split("highest zxid is ")[1].split(",")[0]
            for line in log.read_text().splitlines() if "highest zxid is " in line]
