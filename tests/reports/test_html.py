"""reports.html: the run report, its escaping, its offline plotly, and how it behaves in a real
headless Chromium (no console errors, no network, cards linked to the timeline, nothing planted
in a history runs)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fencecheck.reports.html import script_json, write_report
from fencecheck.reports.rundata import ReportError
from tests.reports.conftest import ARTIFACTS, Browser, copy_run

KINDS = (
    "double-grant",
    "token-regression",
    "stale-write-accepted",
    "interleaved-writes",
    "lost-update",
    "not-linearizable",
)
PLANTED = (  # lock name, key, test name, config value, seed, version (all shown on the page)
    "<script>window.fcPwned=1</script>",
    '"><img src=x onerror="window.fcPwned=2">',
    "<img src=x onerror=window.fcPwned=5>",
    '"><svg onload=window.fcPwned=6>',
    "<script>window.fcPwned=7</script>",
    "</script><script>window.fcPwned=8</script>",
)
PLANTED_ERROR = "<img src=x onerror=window.fcPwned=4>"  # an error: shown in a hover label


def test_script_json_cannot_close_the_script_element() -> None:
    text = script_json({"a": "</script><!--<script>", "b": "\u2028&"})
    assert "<" not in text and ">" not in text and "\u2028" not in text
    assert json.loads(text) == {"a": "</script><!--<script>", "b": "\u2028&"}


def test_each_run_folder_carries_plotly_js_stored_once_in_a_store(store: Path) -> None:
    reports = [write_report(d) for d in sorted(store.glob("*/2026*"))]
    js = list((store / "_static").glob("plotly-*.min.js"))
    assert len(js) == 1 and js[0].stat().st_size > 1_000_000
    for r in reports:
        page = r.read_text()
        src = re.findall(r'<script src="([^"]+)"', page)
        assert src == [js[0].name]  # inside the run folder: it travels with it
        carried = r.parent / src[0]
        assert carried.is_file() and carried.stat().st_ino == js[0].stat().st_ino  # one copy
        assert "http://" not in page.split("<script type=")[0].replace("http://www.w3.org", "")


def test_loose_run_dir_gets_plotly_js_next_to_the_report(tmp_path: Path) -> None:
    run = copy_run("fenced", tmp_path / "somewhere")
    page = write_report(run).read_text()
    (js,) = run.glob("plotly-*.min.js")
    assert f'<script src="{js.name}"></script>' in page
    assert "No violations found" in page


def test_report_shows_every_violation_kind_with_links(tmp_path: Path) -> None:
    page = write_report(copy_run("violations", tmp_path / "run")).read_text()
    for kind in KINDS:
        assert f'<span class="kind">{kind}</span>' in page
    assert "6 violations found" in page
    links = re.findall(r'class="op-link"[^>]*data-index="(\d+)"', page)
    assert {"20", "24", "28", "34", "44", "46", "54"} <= set(links)
    for log in ("nodes/n1/redis.log", "nodes/n2/store.log", "fencecheck.log"):
        assert f'href="{log}"' in page


def test_planted_values_are_escaped_in_the_source(tmp_path: Path) -> None:
    page = write_report(copy_run("planted", tmp_path / "run")).read_text()
    for value in (*PLANTED, PLANTED_ERROR):
        assert value not in page
    assert "&lt;script&gt;window.fcPwned=1&lt;/script&gt;" in page
    # The only closing script tags are the page's own three.
    assert page.count("</script>") == 3


def test_file_names_become_paths_not_urls(tmp_path: Path) -> None:
    run = copy_run("fenced", tmp_path / "run")
    (run / "javascript:window.fcPwned=9").write_text("x")
    (run / "nodes" / "n1" / "a#b?.log").write_text("x")
    page = write_report(run).read_text()
    assert 'href="javascript%3Awindow.fcPwned%3D9"' in page
    assert 'href="nodes/n1/a%23b%3F.log"' in page
    assert 'href="javascript:' not in page


def test_not_a_run_dir_and_a_bad_history_are_report_errors(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="not a run directory"):
        write_report(tmp_path)
    run = copy_run("fenced", tmp_path / "run")
    lines = (run / "history.jsonl").read_text().splitlines()
    lines[3] = lines[3].replace('"type": "ok"', '"type": "okay"').replace(
        '"type": "invoke"', '"type": "okay"'
    )
    (run / "history.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ReportError, match=r"history.jsonl:4: "):
        write_report(run)


def _open(browser: Browser, report: Path) -> None:
    browser.get("about:blank")
    browser.console()
    browser.requests()
    browser.get(report.as_uri())
    browser.wait("return window.fcReady === true")


def _offline(urls: list[str]) -> list[str]:
    return [u for u in urls if not u.startswith(("file://", "data:", "blob:", "about:"))]


@pytest.mark.browser
def test_violation_report_in_chromium(browser: Browser, store: Path) -> None:
    report = write_report(store / "redis-unfenced-pause" / "20261129T230000")
    _open(browser, report)
    assert browser.console() == []
    assert _offline(browser.requests()) == []
    text = browser.js("return document.body.innerText")
    for kind in KINDS:
        assert kind in text
    assert browser.js("return document.querySelectorAll('#timeline .scatterlayer .trace').length")
    # A card's op link zooms the timeline onto that op (#34: the paused client's late write).
    before = browser.js("return document.getElementById('timeline').layout.xaxis.range")
    browser.driver.find_element("css selector", 'a.op-link[data-index="34"]').click()
    browser.wait(
        "var r = document.getElementById('timeline').layout.xaxis.range;"
        "return r[0] <= 2.5 && r[1] >= 2.503 && r[1] - r[0] < 0.5"
    )
    after = browser.js("return document.getElementById('timeline').layout.xaxis.range")
    assert after != before
    assert browser.js("return location.hash") == "#timeline"
    browser.screenshot(ARTIFACTS / "report-violations.png")
    assert browser.console() == []
    assert _offline(browser.requests()) == []


def _hover(browser: Browser, trace: str) -> str:
    """The text of the hover label of the first point of a timeline trace."""
    browser.js(
        "var gd = document.getElementById('timeline'), name = arguments[0];"
        "var i = gd.data.findIndex(function (t) { return t.name === name; });"
        "Plotly.Fx.unhover(gd);"
        "Plotly.Fx.hover(gd, [{curveNumber: i, pointNumber: 0}]);",
        trace,
    )
    text: str = browser.wait(
        "var h = document.querySelector('#timeline .hovertext'); return h && h.textContent"
    )
    return text


@pytest.mark.browser
def test_planted_values_show_as_text_and_run_nothing(browser: Browser, store: Path) -> None:
    report = write_report(store / "planted" / "20261129T231000")
    _open(browser, report)
    assert browser.js("return window.fcPwned") is None
    assert browser.js("return document.querySelectorAll('img[src=x], svg[onload]').length") == 0
    text = browser.js("return document.body.innerText")
    for value in PLANTED:
        # As given (a lock name, an error) or inside an op's JSON value (a key).
        assert value in text or json.dumps(value)[1:-1] in text
    # Plotly renders a subset of HTML in hover labels: the planted lock name stays text there too.
    assert "<script>window.fcPwned=1</script>" in _hover(browser, "surely held")
    assert PLANTED_ERROR in _hover(browser, "write failed")
    # Tags plotly would render (<b>) stay literal in hover labels and legend entries.
    assert "<b>x</b>" in _hover(browser, "fault: &lt;b&gt;x&lt;/b&gt;")
    legend = browser.js(
        "return Array.from(document.querySelectorAll('#timeline .legendtext'))"
        ".map(function (e) { return e.textContent; }).join('|')"
    )
    assert "fault: <b>x</b>" in legend
    assert browser.js("return window.fcPwned") is None
    assert browser.console() == []
    assert _offline(browser.requests()) == []
