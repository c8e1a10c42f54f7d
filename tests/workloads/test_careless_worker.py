"""The worker's side of the careless clients (pure loop logic, with the scripted fakes of
test_worker.py): a client that declares `work-after-failed-renew` keeps its section going after
a refused renewal, and a careless release's evidence lands in the release's ok value."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fencecheck.workloads.base import DefiniteFailure, Grant
from fencecheck.workloads.eventlog import EventLog, read_log
from fencecheck.workloads.loops.worker import Worker
from tests.workloads.test_worker import FakeClient, FakeResource, config, ops, released, run_fake


class CarelessFake(FakeClient):
    def __init__(self, careless: frozenset[str], renew_error: Exception | None = None) -> None:
        super().__init__(renew_error=renew_error)
        self.careless = careless


def test_a_careless_worker_keeps_writing_after_a_refused_renew(tmp_path: Path) -> None:
    cfg = config(tmp_path, renew=True, lease_ms=40, think_ms=15, writes_per_section=4)
    client = CarelessFake(frozenset({"work-after-failed-renew"}), DefiniteFailure("not-owner"))
    got = run_fake(tmp_path, cfg, client, FakeResource(), lambda ev: released(ev) >= 1)
    done = [(f, t) for _, f, t in ops(got)]
    first_refusal = done.index(("renew", "fail"))
    assert ("write", "ok") in done[first_refusal:], done
    assert done.count(("write", "ok")) == 4 and done[-1] == ("release", "ok")


def test_a_strict_client_with_the_same_refusal_stops(tmp_path: Path) -> None:
    cfg = config(tmp_path, renew=True, lease_ms=40, think_ms=15, writes_per_section=4)
    client = CarelessFake(frozenset({"release-without-token"}), DefiniteFailure("not-owner"))
    got = run_fake(tmp_path, cfg, client, FakeResource(), lambda ev: released(ev) >= 1)
    done = [(f, t) for _, f, t in ops(got)]
    assert done[done.index(("renew", "fail")) + 1] == ("release", "ok")


class EvidenceFake(FakeClient):
    def release(self, grant: Grant) -> Mapping[str, Any] | None:  # type: ignore[override]
        return {"deleted_token": 99}


def test_release_evidence_is_recorded_in_the_ok_value(tmp_path: Path) -> None:
    cfg = config(tmp_path, writes_per_section=1)
    with EventLog(cfg.log, cfg.t0_ns) as events:
        worker = Worker(cfg, EvidenceFake(), FakeResource(), events,
                        stop=lambda: released(read_log(cfg.log)) >= 1)
        worker.run()
    oks = [e for e in read_log(cfg.log) if e["f"] == "release" and e["type"] == "ok"]
    assert oks[0]["value"] == {"lock": "a", "token": 1, "deleted_token": 99}
