"""reports.serve: the store viewer lists runs, serves reports and logs, and refuses every path
that would leave the store (raw requests through http.client, so nothing normalises them)."""

from __future__ import annotations

import http.client
import posixpath
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from fencecheck.reports.serve import StoreServer, make_server
from tests.reports.conftest import ARTIFACTS, Browser


@pytest.fixture
def server(store: Path) -> Iterator[StoreServer]:
    srv = make_server(store)
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)


def request(srv: StoreServer, target: str, host_header: str | None = None
            ) -> tuple[int, dict[str, str], bytes]:
    host, port = srv.server_address[:2]
    conn = http.client.HTTPConnection(str(host), port, timeout=10)
    try:
        conn.putrequest("GET", target, skip_host=host_header is not None,
                        skip_accept_encoding=True)
        if host_header is not None:
            conn.putheader("Host", host_header)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def get(srv: StoreServer, target: str) -> tuple[int, str, bytes]:
    status, headers, body = request(srv, target)
    return status, headers.get("Content-Type", ""), body


def test_binds_loopback_by_default(server: StoreServer) -> None:
    assert server.server_address[0] == "127.0.0.1"
    assert server.url.startswith("http://127.0.0.1:")


def test_listing_newest_first_coloured_by_verdict(server: StoreServer) -> None:
    status, ctype, body = get(server, "/")
    assert status == 200 and ctype.startswith("text/html")
    page = body.decode()
    rows = re.findall(r'<tr class="run cell-([a-z-]+)" data-verdict="([a-z ]+)">', page)
    assert rows == [("invalid", "invalid"), ("invalid", "invalid"), ("valid", "valid")]
    dirs = re.findall(r'class="report" href="([^"]+)"', page)
    assert dirs == [
        "/planted/20261129T231000/report.html",
        "/redis-unfenced-pause/20261129T230000/report.html",
        "/etcd-fenced-pause/20261129T225000/report.html",
    ]
    assert "<img src=x" not in page  # the planted test name is escaped here too


def test_opens_a_report_written_on_demand_and_logs_as_text(server: StoreServer) -> None:
    status, ctype, body = get(server, "/redis-unfenced-pause/20261129T230000/report.html")
    assert status == 200 and ctype.startswith("text/html")
    assert b"lost-update" in body
    js = re.search(rb'<script src="([^"]+)"', body)
    assert js is not None
    js_path = posixpath.normpath("/redis-unfenced-pause/20261129T230000/" + js[1].decode())
    status, ctype, _ = get(server, js_path)
    assert (status, ctype.split(";")[0]) == (200, "text/javascript")
    for log in ("nodes/n1/redis.log", "fencecheck.log", "history.jsonl"):
        status, ctype, _ = get(server, f"/redis-unfenced-pause/latest/{log}")
        assert (status, ctype) == (200, "text/plain; charset=utf-8"), log
    status, _, body = get(server, "/redis-unfenced-pause/20261129T230000/nodes/")
    assert status == 200 and b'href="n1/"' in body
    assert get(server, "/redis-unfenced-pause/20261129T230000/nodes")[0] == 301


def test_only_fencecheck_pages_are_served_as_html(server: StoreServer, store: Path) -> None:
    node = store / "planted" / "20261129T231000" / "nodes" / "n1"
    (node / "evil.html").write_text("<script>alert(1)</script>")
    (node / "evil.svg").write_text("<svg onload=alert(1)>")
    (node / "report.html").write_text("<script>alert(1)</script>")  # not a run's root
    (node / "compare.html").write_text("<script>alert(1)</script>")  # no compare.csv beside
    for name in ("evil.html", "evil.svg", "report.html", "compare.html"):
        status, ctype, _ = get(server, f"/planted/20261129T231000/nodes/n1/{name}")
        assert (status, ctype) == (200, "text/plain; charset=utf-8")


@pytest.mark.parametrize(
    ("target", "status"),
    [
        ("/../../../../etc/passwd", 403),
        ("/redis-unfenced-pause/../../etc/passwd", 403),
        ("/%2e%2e/%2e%2e/etc/passwd", 403),
        ("/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd", 403),
        ("/redis-unfenced-pause/latest/..%2f..%2f..%2fetc/passwd", 403),
        ("//etc/passwd", 404),  # http.server itself collapses the leading slashes
        ("/%2Fetc%2Fpasswd", 403),
        ("/./etc", 403),
        ("/..\\..\\etc\\passwd", 403),
        ("/escape/passwd", 403),
        ("/%252e%252e/%252e%252e/etc/passwd", 404),
        ("/no/such/file", 404),
        ("/%ff", 400),
        ("http://127.0.0.1/etc/passwd", 400),
    ],
)
def test_refuses_paths_outside_the_store(
    server: StoreServer, store: Path, target: str, status: int
) -> None:
    (store / "escape").symlink_to("/etc")  # a symlink pointing out of the store
    got, _, body = get(server, target)
    assert got == status
    assert b"root:" not in body


@pytest.mark.browser
def test_viewer_in_chromium(browser: Browser, server: StoreServer) -> None:
    browser.get("about:blank")
    browser.console()
    browser.requests()
    browser.get(server.url)
    assert browser.js("return document.querySelectorAll('tr.run').length") == 3
    colour = browser.js(
        "return getComputedStyle(document.querySelector('tr.run[data-verdict=invalid]'))"
        ".backgroundColor"
    )
    assert colour == "rgb(254, 215, 215)"
    browser.driver.find_element("css selector", 'a.report[href*="redis-unfenced"]').click()
    browser.wait("return window.fcReady === true")
    assert "lost-update" in browser.js("return document.body.innerText")
    browser.driver.find_element("css selector", 'a[href="nodes/n1/redis.log"]').click()
    browser.wait("return document.readyState === 'complete'")
    assert "Ready to accept connections" in browser.js("return document.body.innerText")
    assert browser.console() == []
    outside = [u for u in browser.requests() if not u.startswith(server.url)]
    assert outside == []
    browser.get(server.url + "%2e%2e/%2e%2e/etc/passwd")
    assert "root:" not in browser.js("return document.body.innerText")
    browser.console()  # the 403 is logged as a failed resource load: expected
    browser.get(server.url)
    browser.screenshot(ARTIFACTS / "serve.png", full_page=False)


def test_a_get_writes_nothing(store: Path) -> None:
    srv = make_server(store, write_reports=False)
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        before = sorted(p for p in store.rglob("*"))
        for target in ("/", "/redis-unfenced-pause/20261129T230000/report.html",
                       "/redis-unfenced-pause/20261129T230000/"):
            get(srv, target)
        assert get(srv, "/redis-unfenced-pause/20261129T230000/report.html")[0] == 404
        assert sorted(p for p in store.rglob("*")) == before
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)


def test_missing_reports_are_written_when_the_server_starts(server: StoreServer,
                                                            store: Path) -> None:
    assert len(list(store.glob("*/2026*/report.html"))) == 3


@pytest.mark.parametrize(
    ("host", "status"),
    [("evil.example", 400), ("evil.example:{port}", 400), ("127.0.0.1.evil.example", 400),
     ("", 400), ("localhost:{port}", 200), ("127.0.0.1:{port}", 200), ("LOCALHOST", 200)],
)
def test_host_header_must_be_loopback(server: StoreServer, host: str, status: int) -> None:
    port = server.server_address[1]
    assert request(server, "/", host.format(port=port))[0] == status


def test_a_report_may_run_only_its_own_scripts(server: StoreServer) -> None:
    path = "/redis-unfenced-pause/20261129T230000/report.html"
    status, headers, body = request(server, path)
    assert status == 200
    policy = dict(d.strip().split(" ", 1) for d in headers["Content-Security-Policy"].split(";"))
    sources = policy["script-src"].split()
    (js,) = re.findall(r'<script src="([^"]+)"', body.decode())
    assert sources[-1] == f"{server.url.rstrip('/')}/redis-unfenced-pause/20261129T230000/{js}"
    hashes = sources[:-1]
    assert len(hashes) == 2 and all(h.startswith("'sha256-") for h in hashes)
    assert "unsafe" not in policy["script-src"] and policy["default-src"] == "'none'"
    assert "script-src 'none'" in request(server, "/")[1]["Content-Security-Policy"]
