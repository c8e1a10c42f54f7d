"""reports.serve: the store viewer lists runs, serves reports and logs, and refuses every path
that would leave the store (raw requests through http.client, so nothing normalises them)."""

from __future__ import annotations

import http.client
import os
import posixpath
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fencecheck.reports.rundata import ReportError
from fencecheck.reports.serve import RunStoreServer, exposure, make_server
from tests.conftest import run_fencecheck
from tests.reports.conftest import ARTIFACTS, Browser


@pytest.fixture
def server(store: Path) -> Iterator[RunStoreServer]:
    srv = make_server(store)
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)


def request(srv: RunStoreServer, target: str, host_header: str | None = None
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


def get(srv: RunStoreServer, target: str) -> tuple[int, str, bytes]:
    status, headers, body = request(srv, target)
    return status, headers.get("Content-Type", ""), body


def test_binds_loopback_by_default(server: RunStoreServer) -> None:
    assert server.server_address[0] == "127.0.0.1"
    assert server.url.startswith("http://127.0.0.1:")


def test_listing_newest_first_coloured_by_verdict(server: RunStoreServer) -> None:
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


def test_opens_a_report_written_on_demand_and_logs_as_text(server: RunStoreServer) -> None:
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


def test_only_fencecheck_pages_are_served_as_html(server: RunStoreServer, store: Path) -> None:
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
    server: RunStoreServer, store: Path, target: str, status: int
) -> None:
    (store / "escape").symlink_to("/etc")  # a symlink pointing out of the store
    got, _, body = get(server, target)
    assert got == status
    assert b"root:" not in body


@pytest.mark.browser
def test_viewer_in_chromium(browser: Browser, server: RunStoreServer) -> None:
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


def test_missing_reports_are_written_when_the_server_starts(server: RunStoreServer,
                                                            store: Path) -> None:
    assert len(list(store.glob("*/2026*/report.html"))) == 3


@pytest.mark.parametrize(
    ("host", "status"),
    [("evil.example", 400), ("evil.example:{port}", 400), ("127.0.0.1.evil.example", 400),
     ("", 400), ("localhost:{port}", 200), ("127.0.0.1:{port}", 200), ("LOCALHOST", 200)],
)
def test_host_header_must_be_loopback(server: RunStoreServer, host: str, status: int) -> None:
    port = server.server_address[1]
    assert request(server, "/", host.format(port=port))[0] == status


def test_a_report_may_run_only_its_own_scripts(server: RunStoreServer) -> None:
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


@pytest.mark.parametrize(
    "target",
    ["/" + "a" * 256, "/" + "a" * 255, "/" + "%C3%A9" * 128,
     "/redis-unfenced-pause/" + "b" * 1000 + "/report.html",
     "/" + "/".join(["c" * 200] * 30)],  # each name fits, the whole path is past PATH_MAX
)
def test_a_name_too_long_is_not_found(server: RunStoreServer, target: str) -> None:
    assert get(server, target)[0] == 404
    assert get(server, "/")[0] == 200  # and the server is still there


def test_a_named_pipe_is_refused_without_waiting(server: RunStoreServer, store: Path) -> None:
    run = store / "planted" / "20261129T231000"
    os.mkfifo(run / "pipe.log")
    os.mkfifo(run / "nodes" / "n1" / "redis.log.fifo")
    t = time.monotonic()
    for target in ("/planted/latest/pipe.log", "/planted/latest/nodes/n1/redis.log.fifo"):
        status, _, body = get(server, target)  # the request's timeout is 10 s
        assert (status, body) == (403, b"<!doctype html><p>not a regular file</p>")
    assert time.monotonic() - t < 5
    status, _, body = get(server, "/planted/latest/")
    assert status == 200 and b'href="pipe.log"' in body  # listed, not opened
    assert get(server, "/")[0] == 200


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "FOO"])
def test_methods_other_than_get_and_head_are_405(server: RunStoreServer, method: str) -> None:
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(str(host), port, timeout=10)
    try:
        conn.request(method, "/", body=b"x=1" if method in ("POST", "PUT", "PATCH") else None)
        resp = conn.getresponse()
        assert resp.status == 405 and resp.getheader("Allow") == "GET, HEAD"
        resp.read()
    finally:
        conn.close()
    conn = http.client.HTTPConnection(str(host), port, timeout=10)
    try:
        conn.request("HEAD", "/")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read() == b""
    finally:
        conn.close()


def test_a_port_out_of_range_or_a_wildcard_host_is_refused(store: Path) -> None:
    with pytest.raises(ReportError, match="not a port number"):
        make_server(store, port=99999, write_reports=False)
    with pytest.raises(ReportError, match="wildcard address"):
        make_server(store, "0.0.0.0", 0, write_reports=False)
    for argv, words in ((["--port", "99999"], ("--port", "99999")),
                        (["--port", "-1"], ("--port", "-1")),
                        (["--host", "0.0.0.0", "--port", "0"], ("host 0.0.0.0", "wildcard"))):
        r = run_fencecheck("serve", str(store), *argv, timeout=60)
        assert r.returncode == 3, r.stderr
        assert len(r.stderr.splitlines()) == 1 and all(w in r.stderr for w in words), r.stderr
        assert "internal error" not in r.stderr and not r.stdout


def test_an_address_that_is_not_loopback_is_named_in_a_warning() -> None:
    assert exposure("127.0.0.1") is None and exposure("127.0.0.2") is None
    assert exposure("::1") is None
    text = exposure("192.0.2.7")
    assert text is not None and "readable by anyone" in text
    assert "only requests whose Host is 192.0.2.7, 127.0.0.1, localhost or [::1]" in text


def test_a_foreign_host_is_told_which_hosts_are_answered(server: RunStoreServer) -> None:
    status, _, body = request(server, "/", "evil.example")
    assert status == 400 and b"only requests to 127.0.0.1, [::1], localhost" in body
