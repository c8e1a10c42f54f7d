"""A real unfenced run (redis, pauses, short, fixed seed) read in Chromium: the incident view tells
every incident, and the run folder copied alone renders offline."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fencecheck.checker.names import fault_target, load_names
from tests.conftest import fc_namespaces, run_fencecheck, stopped_processes
from tests.reports.conftest import ARTIFACTS, Browser

pytestmark = [pytest.mark.netns, pytest.mark.browser]


@pytest.fixture(scope="module")
def unfenced_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    store = tmp_path_factory.mktemp("incidents") / "store"
    r = run_fencecheck("run", "--store", str(store), "--fencing", "off", "--nemesis", "pause",
                       "--time-limit", "12", "--lease-ms", "1000", "--seed", "1", timeout=180)
    assert r.returncode == 1, r.stdout + r.stderr
    (run_dir,) = [p.resolve() for p in store.glob("*/latest")]
    run_id = json.loads((run_dir / "test.json").read_text())["run_id"]
    assert fc_namespaces(run_id) == []  # this run's, only: others may be running
    assert stopped_processes(str(store)) == []
    yield run_dir


def _open(browser: Browser, page: Path) -> None:
    browser.get("about:blank")
    browser.console()
    browser.requests()
    browser.get(page.as_uri())
    browser.wait("return window.fcReady === true")


def _offline(urls: list[str]) -> list[str]:
    return [u for u in urls if not u.startswith(("file://", "data:", "blob:", "about:"))]


def test_every_incident_is_drawn_naming_the_paused_client_tokens_and_damage(
    browser: Browser, unfenced_run: Path
) -> None:
    results = json.loads((unfenced_run / "results.json").read_text())
    incidents: list[dict[str, Any]] = results["incidents"]
    assert incidents, "an unfenced run with pauses must have incidents"
    names = load_names(unfenced_run)
    _open(browser, unfenced_run / "report.html")
    drawn = browser.js("return Array.from(document.querySelectorAll('article.incident'))"
                       ".map(function (a) { return a.id; })")
    assert drawn == [f"incident-{i['id']}" for i in incidents]
    paused_seen = 0
    for inc in incidents:
        text: str = browser.js(
            "var a = document.getElementById(arguments[0]);"
            "return a.querySelector('svg.incident-diagram') ? a.innerText + "
            "Array.from(a.querySelectorAll('svg text')).map(function (t) {"
            " return t.textContent; }).join('|') : null", f"incident-{inc['id']}")
        assert text is not None, f"incident {inc['id']} has no diagram"
        stale, nxt = inc["stale_grant"], inc["next_grant"]
        assert names.label(stale["process"]) in text  # e.g. "p0 (node c1)"
        assert f"ok, token {stale['token']}" in text
        if nxt is not None:
            assert names.label(nxt["process"]) in text
            assert f"ok, token {nxt['token']}" in text
        fault = inc["fault"]
        if fault is not None and fault["f"] == "pause":
            target = fault_target(fault["value"])
            assert f"pause of {target}" in text
            paused_seen += names.node(stale["process"]) == target
        if "stale-write-accepted" in inc["kinds"]:
            # the damaging write is named, and drawn red
            assert "Damaging write" in text and f"token {stale['token']}" in text
            assert browser.js("return document.getElementById(arguments[0])"
                              ".querySelectorAll('line.arrow.bad').length",
                              f"incident-{inc['id']}") > 0
    assert paused_seen > 0, "some incident's stale holder is the paused client"
    browser.screenshot(ARTIFACTS / "report-incidents.png", full_page=False)
    assert [m for m in browser.console() if m["level"] == "SEVERE"] == []


def test_a_run_folder_copied_alone_renders_offline(
    browser: Browser, unfenced_run: Path, tmp_path: Path
) -> None:
    alone = tmp_path / "artifact" / "run"
    shutil.copytree(unfenced_run, alone)  # as CI uploads it: no store, no _static next to it
    _open(browser, alone / "report.html")
    assert browser.js("return document.querySelectorAll('#timeline .scatterlayer .trace')"
                      ".length") > 0
    assert browser.js("return document.querySelectorAll('#latency .scatterlayer .trace')"
                      ".length") > 0
    assert browser.console() == []
    requests = browser.requests()
    assert _offline(requests) == []
    assert all(str(alone) in u or not u.startswith("file://") for u in requests), requests
