"""The local web viewer of a store: `make_server(store)` and `serve(store)` (stdlib http.server).

`/` lists the runs newest first, coloured by verdict; every other path is a file or directory of
the store (reports, logs, the plotly JS each run carries). Reports missing from runs that have a
history are written once when the server starts, never on a request: a GET writes nothing. Only
a run's own report (report.html at a run's root) and a comparison (compare.html beside its
compare.csv) are served as HTML; any other file a node left (.html, .svg, logs) is text. Each
page's Content-Security-Policy allows only its own scripts: the hashes of its inline scripts and
the exact URL of the plotly file it names, nothing else (no eval, no other file of the store). A
request whose Host header is not 127.0.0.1, localhost or [::1] (or the address bound) gets 400,
so a web page cannot reach the viewer through a rebound DNS name. Any path that would leave the
store is refused: `..` or `.` segments, empty segments (`//etc/passwd`), backslashes and NUL
(403), and symlinks resolving outside (403);
a request target that is not a plain path (absolute-form `http://…`, `*`) gets 400. Percent-escapes
are decoded exactly once, so `%2e%2e` is `..` (refused) and `%252e` a literal `%2e` (not found).
A name too long for the file system (a segment of 256 bytes or more) is not found (404). Only
directories and regular files are served: a named pipe, socket or device is 403, and a file is
opened without blocking, so a FIFO in the store never holds a request thread. GET and HEAD are
the only methods; any other gets 405 with `Allow: GET, HEAD`.

Binds 127.0.0.1 unless told otherwise. The choice for other addresses: a wildcard address
(0.0.0.0) is refused (ReportError, exit 3 from the CLI), since the Host check needs the one
address a browser names and every request to a wildcard bind through a non-loopback address
would get 400; bind that address itself (`--host 192.0.2.7`). A bound address that is not
loopback is served, with `exposure(address)` the warning the CLI prints at start: the store is
readable from other machines, and only requests whose Host is that address or a loopback name
are answered.
"""

from __future__ import annotations

import base64
import hashlib
import html
import ipaddress
import logging
import mimetypes
import os
import re
import stat
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urljoin

from msgspec import UNSET

from fencecheck.reports.html import env, static_text, write_report
from fencecheck.reports.rundata import ReportError, find_runs, load_run

log = logging.getLogger(__name__)

TEXT_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".csv": "text/csv; charset=utf-8",
    ".png": "image/png",
}
# Pages reach nothing outside this server; scripts are allowed one by one (see `csp`). plotly
# sets inline styles, hence 'unsafe-inline' for style only.
CSP_BASE = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data: blob:; "
    "connect-src 'none'; font-src 'self' data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
NONE = "'none'"
LOOPBACK = frozenset(("127.0.0.1", "localhost", "[::1]"))
ALLOW = "GET, HEAD"
NAME_MAX = 255  # bytes of one path segment on Linux file systems
INLINE_SCRIPT = re.compile(rb"<script(?: type=\"application/json\"[^>]*)?>(.*?)</script>", re.S)
SCRIPT_SRC = re.compile(rb'<script src="([^"]+)"></script>')


def csp(page: bytes, page_url: str) -> str:
    """The policy of one page: its inline scripts by hash, its script files by exact URL."""
    sources = [
        "'sha256-" + base64.b64encode(hashlib.sha256(m[1]).digest()).decode() + "'"
        for m in INLINE_SCRIPT.finditer(page)
    ]
    for m in SCRIPT_SRC.finditer(page):
        url = urljoin(page_url, html.unescape(m[1].decode()))
        sources.append(quote(url, safe=":/%"))
    return f"{CSP_BASE}; script-src {' '.join(sources) or NONE}"


def host_allowed(host_header: str | None, bound: str) -> bool:
    """127.0.0.1, localhost or [::1] (any port), or the address the server is bound to."""
    if not host_header:
        return False
    host = host_header.strip().lower()
    if host.startswith("["):
        name = host[: host.find("]") + 1] if "]" in host else host
    else:
        name = host.rsplit(":", 1)[0] if ":" in host else host
    return name in LOOPBACK or name == bound.lower() or name == f"[{bound.lower()}]"


def is_page(path: Path) -> bool:
    """report.html at a run's root, or compare.html beside its compare.csv."""
    if path.name == "report.html":
        return (path.parent / "test.json").is_file() or (path.parent / "history.jsonl").is_file()
    return path.name == "compare.html" and (path.parent / "compare.csv").is_file()


class Refused(Exception):
    def __init__(self, status: HTTPStatus, why: str) -> None:
        super().__init__(why)
        self.status = status


def _path_of(target: str) -> str:
    # Not urlsplit: it reads `//etc/passwd` as a host "etc" and the path "/passwd".
    return target.split("?", 1)[0].split("#", 1)[0]


def resolve(store: Path, target: str) -> Path:
    """The file or directory of the store a request target names, or Refused."""
    if not target.startswith("/"):
        raise Refused(HTTPStatus.BAD_REQUEST, "not a path")
    raw = _path_of(target)
    try:
        path = unquote(raw, errors="strict")
    except UnicodeDecodeError as e:
        raise Refused(HTTPStatus.BAD_REQUEST, "bad percent-escape") from e
    if "\x00" in path or "\\" in path:
        raise Refused(HTTPStatus.FORBIDDEN, "bad character")
    parts = path.split("/")[1:]
    if parts and parts[-1] == "":
        parts.pop()  # a trailing slash names a directory
    if any(p in ("", ".", "..") for p in parts):
        raise Refused(HTTPStatus.FORBIDDEN, "path leaves the store")
    if any(len(os.fsencode(p)) > NAME_MAX for p in parts):
        raise Refused(HTTPStatus.NOT_FOUND, "not found")  # no file can have that name
    candidate = store.joinpath(*parts)
    real = Path(os.path.realpath(candidate))
    if real != store and store not in real.parents:
        raise Refused(HTTPStatus.FORBIDDEN, "path leaves the store")
    try:
        os.stat(real)
    except OSError as e:  # missing, or a whole path past PATH_MAX (ENAMETOOLONG)
        raise Refused(HTTPStatus.NOT_FOUND, "not found") from e
    return real


def read_regular(path: Path) -> bytes | None:
    """The content of path if it is a regular file, else None. Opened non-blocking and checked
    on the open descriptor: opening a FIFO for reading would wait for a writer forever, and a
    check before the open could be raced by a rename."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    with open(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return fh.read()


def _url(store: Path, path: Path) -> str:
    return "/" + quote(path.relative_to(store).as_posix())


def _content_type(path: Path) -> str:
    if is_page(path):
        return "text/html; charset=utf-8"
    suffix = path.suffix.lower()
    if suffix in TEXT_TYPES:
        return TEXT_TYPES[suffix]
    guessed, _ = mimetypes.guess_type(path.name)
    if guessed in ("image/png", "image/jpeg", "image/gif"):
        return guessed
    # Logs, histories and anything unknown are shown as text, never interpreted as a page.
    return "text/plain; charset=utf-8"


def _runs(store: Path) -> list[dict[str, Any]]:
    rows = []
    for run_dir in find_runs([store]):
        try:
            run = load_run(run_dir, with_ops=False)
        except ReportError as e:
            log.warning("skipping %s: %s", run_dir, e)
            continue
        has_report = (run_dir / "report.html").is_file()
        rows.append(
            {
                "started": "" if run.test.started is UNSET else run.test.started,
                "dir": run_dir.name,
                "name": run.name,
                "verdict": run.verdict,
                "violations": len(run.violations),
                "config": ", ".join(
                    f"{k}={v}"
                    for k in ("backend", "client", "resource", "nemesis", "fencing")
                    if (v := getattr(run.settings, k)) is not UNSET
                ),
                "href": _url(store, run_dir) + "/",
                "report": _url(store, run_dir / "report.html") if has_report else None,
            }
        )
    rows.sort(key=lambda r: (r["dir"], r["started"]), reverse=True)
    return rows


class StoreHandler(BaseHTTPRequestHandler):
    server: RunStoreServer
    server_version = "fencecheck"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def do_HEAD(self) -> None:
        self._handle(body=False)

    def do_GET(self) -> None:
        self._handle(body=True)

    def parse_request(self) -> bool:
        """The request line and headers; a method other than GET or HEAD is answered 405 here
        (http.server would say 501 for any method without a do_ method) and the connection
        closed, since its body is never read."""
        if not super().parse_request():
            return False
        if self.command in ("GET", "HEAD"):
            return True
        data = b"<!doctype html><p>method not allowed</p>"
        self.send_response(HTTPStatus.METHOD_NOT_ALLOWED)
        self.send_header("Allow", ALLOW)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        return False

    def _send(self, status: HTTPStatus, ctype: str, data: bytes, body: bool) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Content-Type-Options", "nosniff")
        page_url = f"http://{self.headers.get('Host', '')}{quote(_path_of(self.path), safe='/%')}"
        policy = csp(data, page_url) if ctype.startswith("text/html") else CSP_BASE
        self.send_header("Content-Security-Policy", policy)
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        if body:
            self.wfile.write(data)

    def _page(self, status: HTTPStatus, text: str, body: bool) -> None:
        self._send(status, "text/html; charset=utf-8", text.encode(), body)

    def _handle(self, body: bool) -> None:
        store = self.server.store
        bound = str(self.server.server_address[0])
        if not host_allowed(self.headers.get("Host"), bound):
            names = ", ".join(sorted({*LOOPBACK, bound}))
            why = f"bad Host header: only requests to {names} are answered"
            self._page(HTTPStatus.BAD_REQUEST, f"<!doctype html><p>{html.escape(why)}</p>", body)
            return
        try:
            if _path_of(self.path) == "/favicon.ico":
                self._send(HTTPStatus.NO_CONTENT, "image/x-icon", b"", body)
                return
            if _path_of(self.path) == "/":
                page = env().get_template("serve_index.html.j2").render(
                    runs=_runs(store), store=str(store), css=static_text("report.css")
                )
                self._page(HTTPStatus.OK, page, body)
                return
            path = resolve(store, self.path)
        except Refused as e:
            msg = f"<!doctype html><title>{e.status.value}</title><p>{html.escape(str(e))}</p>"
            self._page(e.status, msg, body)
            return
        if path.is_dir():
            if not _path_of(self.path).endswith("/"):
                self.send_response(HTTPStatus.MOVED_PERMANENTLY)
                self.send_header("Location", _url(store, path) + "/")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self._page(HTTPStatus.OK, self._listing(store, path), body)
            return
        try:
            data = read_regular(path)
        except OSError:
            self._page(HTTPStatus.FORBIDDEN, "<!doctype html><p>cannot read</p>", body)
            return
        if data is None:
            self._page(HTTPStatus.FORBIDDEN, "<!doctype html><p>not a regular file</p>", body)
            return
        self._send(HTTPStatus.OK, _content_type(path), data, body)

    def _listing(self, store: Path, directory: Path) -> str:
        entries = []
        for child in sorted(directory.iterdir(), key=lambda p: (not p.is_dir(), p.name)):
            entries.append(
                {
                    "name": child.name + ("/" if child.is_dir() else ""),
                    "href": quote(child.name) + ("/" if child.is_dir() else ""),
                }
            )
        return env().get_template("serve_dir.html.j2").render(
            path=_url(store, directory) if directory != store else "/",
            entries=entries,
            css=static_text("report.css"),
        )


class RunStoreServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, store: Path, address: tuple[str, int]) -> None:
        self.store = Path(os.path.realpath(store))
        super().__init__(address, StoreHandler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/"


def write_missing_reports(store: Path) -> list[Path]:
    """The report of every run that has a history but no report.html, written now (at start):
    the server itself never writes on a request."""
    written = []
    for run_dir in find_runs([store]):
        if (run_dir / "history.jsonl").is_file() and not (run_dir / "report.html").is_file():
            try:
                written.append(write_report(run_dir))
            except ReportError as e:
                log.warning("cannot write the report of %s: %s", run_dir, e)
    return written


def make_server(store: Path, host: str = "127.0.0.1", port: int = 0, *,
                write_reports: bool = True) -> RunStoreServer:
    """A server of store, bound but not yet serving (port 0: any free port; see `.url`).
    write_reports: first write the reports that runs lack. ReportError for a port out of range
    or a wildcard address (see the module's docstring)."""
    if not 0 <= port <= 65535:
        raise ReportError(f"port {port}: not a port number (0 to 65535; 0: any free port)")
    if not store.is_dir():
        raise ReportError(f"{store}: not a directory")
    if write_reports:
        write_missing_reports(store)
    server = RunStoreServer(store, (host, port))
    if _address(str(server.server_address[0])).is_unspecified:
        server.server_close()
        raise ReportError(f"host {host}: a wildcard address is not served (requests through "
                          "any other address would fail the Host check); bind the one address "
                          "to serve on, or 127.0.0.1")
    return server


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(host.strip("[]"))


def exposure(bound: str) -> str | None:
    """The warning for a server bound to `bound` (an IP address) if it is not loopback."""
    if _address(bound).is_loopback:
        return None
    return (f"{bound} is not a loopback address: the store is readable by anyone who can reach "
            f"it, and only requests whose Host is {bound}, 127.0.0.1, localhost or [::1] are "
            "answered")


def serve(
    store: Path,
    host: str = "127.0.0.1",
    port: int = 8000,
    ready: Callable[[str], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> None:
    """Serve store until interrupted; ready(url) is called once the socket is bound, warn(text)
    before it if the address is not loopback."""
    server = make_server(store, host, port)
    try:
        if warn is not None and (text := exposure(str(server.server_address[0]))) is not None:
            warn(text)
        if ready is not None:
            ready(server.url)
        server.serve_forever()
    except KeyboardInterrupt:
        log.info("stopped")
    finally:
        server.server_close()
