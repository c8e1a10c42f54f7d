"""reports.compare and reports.junit over a store of hand-made runs, and the matrix in Chromium."""

from __future__ import annotations

import csv
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from fencecheck.reports.compare import KINDS, ExpectedRow, compare, csv_safe, summarize
from fencecheck.reports.junit import write_junit
from fencecheck.reports.rundata import ReportError, find_runs
from tests.reports.conftest import ARTIFACTS, Browser


def test_find_runs_walks_stores_once_and_takes_run_dirs(store: Path) -> None:
    runs = find_runs([store])
    assert [r.parent.name for r in runs] == ["etcd-fenced-pause", "planted", "redis-unfenced-pause"]
    again = find_runs([store, store / "planted" / "latest"])
    assert again == runs  # the `latest` link names a run already found
    with pytest.raises(ReportError, match="no such file"):
        find_runs([store / "nope"])


def test_summary_counts_kinds_latency_and_first_violation(store: Path) -> None:
    s = summarize(store / "redis-unfenced-pause" / "20261129T230000")
    assert s.verdict == "invalid"
    assert s.violations == {
        "double-grant": 1,
        "token-regression": 1,
        "stale-write-accepted": 1,
        "interleaved-writes": 1,
        "lost-update": 1,
        "duplicate-effect": 0,  # a column for every kind the checks declare, found or not
        "write-after-notice": 0,
        "not-linearizable": 1,
    }
    assert (s.notices, s.notice_lead_ms) == (0, None)  # no lost-lock notices in this history
    assert list(s.violations) == list(KINDS)  # in the checks' order
    assert s.first_violation_s == pytest.approx(1.2)  # the linearizability counterexample's op
    assert s.ok_frac == pytest.approx(25 / 28)
    assert s.p50_ms == pytest.approx(3.0) and s.p99_ms == pytest.approx(60.0)
    assert s.report is not None and s.report.is_file()  # written because it was missing
    v = summarize(store / "etcd-fenced-pause" / "20261129T225000")
    assert (v.verdict, v.first_violation_s, sum(v.violations.values())) == ("valid", None, 0)


def test_compare_writes_matrix_csv_and_html_linking_reports(store: Path, tmp_path: Path) -> None:
    html_path, csv_path = compare([store], tmp_path / "out")
    rows = list(csv.DictReader(csv_path.open()))
    assert len(rows) == 3
    by_backend = {r["backend"]: r for r in rows}
    redis, etcd = by_backend["redis"], by_backend["etcd"]
    assert (redis["nemesis"], redis["fencing"], redis["verdict"]) == (
        "pause+partition",
        "no",
        "invalid",
    )
    assert redis["lost-update"] == "1" and redis["double-grant"] == "1"
    assert (etcd["verdict"], etcd["fencing"], etcd["lost-update"]) == ("valid", "yes", "0")
    page = html_path.read_text()
    hrefs = set(re.findall(r'href="([^"]+)"', page))
    assert len(hrefs) == 3
    for href in hrefs:
        assert not href.startswith("/") and (html_path.parent / href).is_file()
    assert "<svg onload" not in page and "&lt;svg onload" in page


def test_an_expected_finding_is_met_and_a_missed_one_is_red(store: Path, tmp_path: Path) -> None:
    expect = {"redis-unfenced-pause": "must-find", "etcd-fenced-pause": "must-find"}
    _, csv_path = compare([store], tmp_path / "out", expectations=expect)
    by_backend = {r["backend"]: r for r in csv.DictReader(csv_path.open())}
    assert (by_backend["redis"]["expect"], by_backend["redis"]["outcome"]) == (
        "must-find", "found as expected")
    assert by_backend["etcd"]["outcome"] == "MISSED: no violations found"
    assert by_backend["etcd"]["workload"] == "lock"  # rows group by workload too


def test_a_bad_expectation_is_a_report_error(store: Path, tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="'maybe' is not must-find or must-pass"):
        compare([store], tmp_path / "out", expectations={"x": "maybe"})


def test_csv_cells_that_a_spreadsheet_would_run_are_escaped(store: Path, tmp_path: Path) -> None:
    run = store / "etcd-fenced-pause" / "20261129T225000"
    test = json.loads((run / "test.json").read_text())
    test["config"]["client"] = "=HYPERLINK(\"http://x\",\"y\")"
    test["config"]["resource"] = "@SUM(A1)"
    (run / "test.json").write_text(json.dumps(test))
    _, csv_path = compare([store], tmp_path / "out")
    (etcd,) = [r for r in csv.DictReader(csv_path.open()) if r["backend"] == "etcd"]
    assert etcd["client"] == "'=HYPERLINK(\"http://x\",\"y\")"
    assert etcd["resource"] == "'@SUM(A1)"
    assert csv_safe("-1+2") == "'-1+2" and csv_safe(-1) == -1 and csv_safe("ok") == "ok"


def test_compare_groups_runs_of_one_configuration(store: Path, tmp_path: Path) -> None:
    import shutil

    src = store / "redis-unfenced-pause" / "20261129T230000"
    shutil.copytree(src, src.parent / "20261130T000000")
    _, csv_path = compare([store], tmp_path / "out")
    (redis,) = [r for r in csv.DictReader(csv_path.open()) if r["backend"] == "redis"]
    assert (redis["runs"], redis["invalid_runs"], redis["lost-update"]) == ("2", "2", "2")
    assert len(redis["reports"].split(";")) == 2


def test_compare_with_nothing_to_compare_is_a_report_error(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="no run directories"):
        compare([tmp_path], tmp_path / "out")


def test_junit_one_case_per_run_failures_carry_explanations(store: Path, tmp_path: Path) -> None:
    runs = find_runs([store])
    path = tmp_path / "junit.xml"
    write_junit([*runs, tmp_path], path, suite="locks")
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("name"), suite.get("tests"), suite.get("failures"), suite.get("errors")) == (
        "locks", "4", "2", "1"
    )
    cases = {c.get("classname"): c for c in suite.iter("testcase")}
    assert cases["etcd-fenced-pause"].find("failure") is None
    failure = cases["redis-unfenced-pause"].find("failure")
    assert failure is not None and failure.text is not None
    assert "6 violations" in (failure.get("message") or "")
    assert "[lost-update] process 4's last read" in failure.text
    assert failure.text.count("\n[") == 5  # one line per violation
    planted = cases["<img src=x onerror=window.fcPwned=5>"].find("failure")
    assert planted is not None and "<script>window.fcPwned=1</script>" in (planted.text or "")


@pytest.mark.browser
def test_matrix_in_chromium(browser: Browser, store: Path, tmp_path: Path) -> None:
    html_path, _ = compare([store], tmp_path / "out")
    browser.get("about:blank")
    browser.console()
    browser.requests()
    browser.get(html_path.as_uri())
    assert browser.js("return document.querySelectorAll('#matrix tr.cell-invalid').length") == 2
    assert browser.js("return document.querySelectorAll('#matrix tr.cell-valid').length") == 1
    assert browser.js("return window.fcPwned") is None
    browser.driver.find_element("css selector", '#grid td.cell-valid a').click()
    browser.wait("return window.fcReady === true")
    assert "No violations found" in browser.js("return document.body.innerText")
    assert browser.console() == []
    assert [u for u in browser.requests() if not u.startswith(("file://", "data:"))] == []
    browser.get(html_path.as_uri())
    browser.screenshot(ARTIFACTS / "compare.png")


@pytest.mark.browser
def test_a_row_that_met_must_find_is_shown_as_met_in_chromium(
    browser: Browser, store: Path, tmp_path: Path
) -> None:
    run = store / "redis-unfenced-pause" / "20261129T230000"
    rows = [ExpectedRow("unfenced-pause", "must-find", True, "invalid", (("seed 42", run),)),
            ExpectedRow("fenced", "must-pass", False, "invalid", ())]
    html_path, _ = compare([store], tmp_path / "out",
                           expectations={"redis-unfenced-pause": "must-find"},
                           expected_rows=rows)
    browser.get(html_path.as_uri())
    met = browser.js("var r = document.querySelector("
                     "'#expectations tr[data-row=\"unfenced-pause\"]');"
                     "return [r.className, getComputedStyle(r).backgroundColor,"
                     " r.querySelector('.outcome').innerText]")
    assert met == ["cell-met", "rgb(198, 246, 213)", "met: found as expected"]
    missed = browser.js("return document.querySelector('#expectations tr[data-row=\"fenced\"]')"
                        ".className")
    assert missed == "cell-missed"
    cell = browser.js("return Array.from(document.querySelectorAll('#grid td.cell-met'))"
                      ".map(function (td) { return td.innerText; })")
    assert len(cell) == 1 and "found as expected" in cell[0]
    browser.screenshot(ARTIFACTS / "compare-expectations.png")


def test_junit_survives_control_characters(store: Path, tmp_path: Path) -> None:
    run = store / "redis-unfenced-pause" / "20261129T230000"
    results = json.loads((run / "results.json").read_text())
    results["checks"]["counter"]["violations"][0]["explanation"] = "bad \x01\x1b[31m byte"
    (run / "results.json").write_text(json.dumps(results))
    path = tmp_path / "junit.xml"
    write_junit([run], path, suite="s")
    failure = ET.parse(path).getroot().find("testsuite/testcase/failure")
    assert failure is not None and "bad \ufffd\ufffd[31m byte" in (failure.text or "")


def test_the_notice_column_says_none_or_the_median_lead_or_lag() -> None:
    from fencecheck.reports.compare import notice_text

    assert notice_text(0, None) == "none"  # the library gave no notice (or none was recorded)
    assert notice_text(3, None) == "no lease to compare"
    assert notice_text(3, 120.4) == "lead 120 ms"
    assert notice_text(2, -2500.0) == "lag 2500 ms"
