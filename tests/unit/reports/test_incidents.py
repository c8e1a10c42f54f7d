"""The incident view and process names, on the hand-made run folders (pure logic; the browser
and real-run checks are in test_incidents_browser.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fencecheck.checker.names import (
    FINAL_READ_BASE,
    ProcessNames,
    fault_target,
    legend,
    load_names,
)
from fencecheck.records.results import OpRef, Violation, from_document
from fencecheck.reports.html import write_report
from fencecheck.reports.incidents import _damaging_write, incident_violations
from tests.reports.conftest import copy_run


def test_process_ids_map_to_workers_and_nodes_through_worker_configs(tmp_path: Path) -> None:
    for w, node in enumerate(("c1", "c2", "c3")):
        (tmp_path / "nodes" / node).mkdir(parents=True)
        conf = {"worker": w, "concurrency": 3, "process_base": 0}
        (tmp_path / "nodes" / node / "worker.json").write_text(json.dumps(conf))
    (tmp_path / "final-read.json").write_text(json.dumps({"process_base": FINAL_READ_BASE}))
    names = load_names(tmp_path)
    # worker i runs as i + k × concurrency after k retirements
    assert [names.label(p) for p in (0, 4, 8)] == ["p0 (node c1)", "p4 (node c2)", "p8 (node c3)"]
    assert names.label(FINAL_READ_BASE) == "final read (p1000000)"
    assert names.label("nemesis") == "nemesis"


def test_without_worker_configs_names_are_plain_process_ids(tmp_path: Path) -> None:
    assert load_names(tmp_path).label(7) == "p7"
    assert ProcessNames(5, {}).label(7) == "p7"


def test_fault_target_reads_what_the_nemesis_logged() -> None:
    assert fault_target({"targets": ["c5"], "paused": ["c5"]}) == "c5"
    assert fault_target({"nodes": ["n1", "n2"]}) == "n1, n2"
    assert fault_target({"shape": "majority"}) == "majority"
    assert fault_target(None) == ""


def test_incident_violations_follow_the_positions_in_each_check() -> None:
    grant = {"process": 0, "index": 1, "token": 1}
    results = from_document({
        "checks": {"fencing": {"violations": [{"kind": "a"}, {"kind": "b"}]}},
        "incidents": [{"id": 1, "violations": [{"check": "fencing", "n": 1}], "lock": "L",
                       "stale_grant": grant, "fault": None, "next_grant": None, "kinds": [],
                       "story": ""}],
    })
    assert incident_violations(results, results.incidents[0]) == [
        ("fencing", 1, Violation(kind="b"))
    ]


def test_report_draws_every_incident_with_its_grants_fault_and_damaging_write(
    tmp_path: Path,
) -> None:
    run = copy_run("violations", tmp_path / "run")
    results = json.loads((run / "results.json").read_text())
    page = write_report(run).read_text()
    articles = re.findall(r'<article class="incident" id="incident-(\d+)".*?</article>', page,
                          flags=re.S)
    assert [int(i) for i in articles] == [i["id"] for i in results["incidents"]]
    first = results["incidents"][0]
    body = page.split('id="incident-1"', 1)[1].split("</article>", 1)[0]
    assert "<svg" in body and "lock service" in body and "resource" in body
    assert f"p{first['stale_grant']['process']}" in body
    assert f"ok, token {first['stale_grant']['token']}" in body
    assert f"ok, token {first['next_grant']['token']}" in body
    assert "pause of c0" in body  # the fault names its target
    assert 'class="arrow bad' in body  # the damaging write, drawn red
    assert "surely over at" in body
    assert first["story"].replace('"', "&#34;") in body


def test_a_report_without_incidents_has_no_incident_section(tmp_path: Path) -> None:
    page = write_report(copy_run("fenced", tmp_path / "run")).read_text()
    assert 'id="incidents"' not in page


@pytest.mark.parametrize(
    ("kind", "ops", "damage"),
    [
        # the lower-token write accepted after the higher one
        ("stale-write-accepted", [(1, 28, 4), (0, 34, 3)], 34),
        # a1, b, a2: the stale holder's a2 after the next holder's b ...
        ("interleaved-writes", [(0, 20, 3), (1, 28, 4), (0, 34, 3)], 34),
        # ... or a stale b between the next holder's a1 and a2
        ("interleaved-writes", [(2, 50, 64), (1, 52, 52), (2, 54, 64)], 52),
        ("interleaved-writes", [(2, 50, None), (1, 52, None), (2, 54, None)], 52),
        ("lost-update", [(4, 54, 1), (4, 56, None)], None),
    ],
)
def test_the_damaging_write_is_the_lower_token_one_accepted_late(
    kind: str, ops: list[tuple[int, int, int | None]], damage: int | None
) -> None:
    v = Violation(kind=kind, ops=[OpRef(process=p, index=i, time_ns=0, token=t, f="write")
                                  for p, i, t in ops])
    assert _damaging_write(v) == damage


def test_legend_names_the_processes_a_text_mentions() -> None:
    names = ProcessNames(5, {0: "c1", 4: "c5"})
    assert legend(names, [9, 4, 1_000_000, "nemesis", 9]) == (
        "p4 = node c5, p9 = node c5, p1000000 = final read")


def test_an_incident_with_little_known_still_draws(tmp_path: Path) -> None:
    run = copy_run("violations", tmp_path / "run")
    results = json.loads((run / "results.json").read_text())
    results["incidents"] = [
        {"id": 1, "lock": "L", "stale_grant": {"process": 0, "index": 999_999, "token": None},
         "fault": {"f": "partition", "start_time_ns": 5, "end_time_ns": None, "value": None},
         "next_grant": None, "violations": [], "kinds": [], "story": ""},
    ]
    (run / "results.json").write_text(json.dumps(results))
    page = write_report(run).read_text()
    body = page.split('id="incident-1"', 1)[1].split("</article>", 1)[0]
    assert "<svg" in body and "partition (not healed)" in body and "lock service" in body


def test_a_lost_lock_notice_is_on_the_timeline_and_in_its_incident(tmp_path: Path) -> None:
    from fencecheck.checker.analyze import analyze
    from fencecheck.checker.history import load_ops
    from fencecheck.records import results as results_record

    run = copy_run("violations", tmp_path / "run")
    notice = {"lock": "L", "token": 5, "reason": "LOST"}
    w = {"key": "L", "value": 1, "token": 5, "lock": "L"}
    events = [(0, 0, "invoke", "acquire", {"lock": "L", "lease_ms": 1000}),
              (1_000_000, 0, "ok", "acquire", {"lock": "L", "lease_ms": 1000, "token": 5}),
              (1_200_000_000, 0, "invoke", "notice", notice),
              (1_200_000_000, 0, "ok", "notice", notice),
              (1_300_000_000, 0, "invoke", "write", w), (1_310_000_000, 0, "ok", "write", w)]
    (run / "history.jsonl").write_text("".join(
        json.dumps({"index": i, "time": t, "process": p, "type": ty, "f": f, "value": v}) + "\n"
        for i, (t, p, ty, f, v) in enumerate(events)))
    results = analyze(load_ops(run / "history.jsonl"))
    results_record.write(run / "results.json", results.record())
    [incident] = results.incidents
    assert incident["notice"]["lead_ns"] == 990_000_000 - 1_200_000_000  # a 210 ms lag
    page = write_report(run).read_text()
    assert "lost-lock notice" in page  # its trace on the timeline
    body = page.split('id="incident-1"', 1)[1].split("</article>", 1)[0]
    assert 'class="lost-notice"' in body and "LOST at 1.200 s (210 ms after" in body
    assert "Its lock library told it at 1.2 s (LOST), 210 ms after" in body
