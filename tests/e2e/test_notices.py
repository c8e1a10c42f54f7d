"""Lost-lock notices end to end through `fencecheck run` (real ZooKeeper in network namespaces,
short runs, fixed seeds): kazoo's SUSPENDED/LOST states recorded under a pause of the holder; a
careless holder (`notices=work`) that keeps writing after its notice is a `write-after-notice`
violation, and a strict one (`notices=stop`) never is. The other libraries' notices are shown
beside their own runs (tests/e2e/test_third_party.py, test_client_go.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import at_once
from tests.e2e.test_run_backends import kinds, must_find, run

pytestmark = [pytest.mark.netns, pytest.mark.usefixtures("no_leftovers")]

KIND = "write-after-notice"
# the holder paused past its 1 s session; sections of 3 writes 200 ms apart, so that a holder
# told on waking has writes left to make
KAZOO = ("--backend", "zookeeper", "--client", "zookeeper", "--nemesis", "pause", "--fencing",
         "off", "--lease-ms", "1000", "--time-limit", "12", "--writes", "3", "--think-ms", "200")


def told(store: Path, name: str) -> list[dict[str, Any]]:
    """The notices of a run's history (ok lines)."""
    lines = (store / name / "latest" / "history.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["f"] == "notice" and e["type"] == "ok"]


def test_kazoo_tells_a_paused_holder_and_only_a_careless_one_writes_after_it(
        tmp_path: Path) -> None:
    (work, stop) = at_once(
        lambda: run(tmp_path, "kazoo-work-1", *KAZOO, "--seed", "1", "--client-opt",
                    "notices=work"),
        lambda: run(tmp_path, "kazoo-stop", *KAZOO, "--seed", "1", "--client-opt",
                    "notices=stop"))
    # the strict holder: told (kazoo's states, with its grant's token), never wrote after it
    code, results = stop
    assert KIND not in kinds(results), results["checks"].get("notices")
    notices = told(tmp_path, "kazoo-stop")
    assert notices and {n["value"]["reason"] for n in notices} <= {"SUSPENDED", "LOST"}
    assert all(type(n["value"]["token"]) is int for n in notices)
    details = results["checks"]["notices"]
    assert details["grants_with_notice"] >= 1 and details["median_lead_ns"] is not None
    # the careless one: found (another seed if the first one's pauses missed)
    code, results = work
    if not (code == 1 and KIND in kinds(results)):
        must_find(tmp_path, "kazoo-work", {KIND}, *KAZOO, "--client-opt", "notices=work",
                  seeds=(2,))
    assert told(tmp_path, "kazoo-work-1")
