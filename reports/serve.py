"""The local web viewer of a store: `make_server(store)` and `serve(store)` (stdlib http.server).

`/` lists the runs newest first, coloured by verdict; every other path is a file or directory of
the store (reports, logs, the shared plotly JS). A report missing from a run that has a history is
written on first request. Only report.html and compare.html are served as HTML; any other file
a node left (.html, .svg, logs) is text. Any path that would leave the store is refused: `..` or
`.` segments, empty segments (`//etc/passwd`), backslashes and NUL (403), and symlinks resolving
outside (403);
a request target that is not a plain path (absolute-form `http://…`, `*`) gets 400. Percent-escapes
are decoded exactly once, so `%2e%2e` is `..` (refused) and `%252e` a literal `%2e` (not found).
Binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import html
import logging
import mimetypes
import os
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

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
# Only pages fencecheck writes are served as HTML; any other .html (or .svg, .xml) a node left
# in its directory is shown as text, so it cannot run script in the viewer's origin.
PAGES = frozenset(("report.html", "compare.html"))
# Pages may run their own inline script (reports do) but may reach nothing outside this server.
CSP = (
    "default-src 'self'; script-src 'self' 'unsafe-inline' 'unsafe-eval'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


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
    candidate = store.joinpath(*parts)
    real = Path(os.path.realpath(candidate))
    if real != store and store not in real.parents:
        raise Refused(HTTPStatus.FORBIDDEN, "path leaves the store")
    if not real.exists():
        raise Refused(HTTPStatus.NOT_FOUND, "not found")
    return real


def _url(store: Path, path: Path) -> str:
    return "/" + quote(path.relative_to(store).as_posix())


def _content_type(path: Path) -> str:
    if path.name in PAGES:
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
        has_report = (run_dir / "report.html").is_file() or (run_dir / "history.jsonl").is_file()
        rows.append(
            {
                "started": str(run.test.get("started", "")),
                "dir": run_dir.name,
                "name": run.name,
                "verdict": run.verdict,
                "violations": len(run.violations),
                "config": ", ".join(
                    f"{k}={run.config.get(k)}"
                    for k in ("backend", "client", "resource", "nemesis", "fencing")
                    if k in run.config
                ),
                "href": _url(store, run_dir) + "/",
                "report": _url(store, run_dir / "report.html") if has_report else None,
            }
        )
    rows.sort(key=lambda r: (r["dir"], r["started"]), reverse=True)
    return rows


class StoreHandler(BaseHTTPRequestHandler):
    server: StoreServer
    server_version = "fencecheck"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def do_HEAD(self) -> None:
        self._handle(body=False)

    def do_GET(self) -> None:
        self._handle(body=True)

    def _send(self, status: HTTPStatus, ctype: str, data: bytes, body: bool) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        if body:
            self.wfile.write(data)

    def _page(self, status: HTTPStatus, text: str, body: bool) -> None:
        self._send(status, "text/html; charset=utf-8", text.encode(), body)

    def _handle(self, body: bool) -> None:
        store = self.server.store
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
            try:
                path = resolve(store, self.path)
            except Refused as e:
                if e.status == HTTPStatus.NOT_FOUND and self._make_report(store):
                    path = resolve(store, self.path)
                else:
                    raise
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
            data = path.read_bytes()
        except OSError:
            self._page(HTTPStatus.FORBIDDEN, "<!doctype html><p>cannot read</p>", body)
            return
        self._send(HTTPStatus.OK, _content_type(path), data, body)

    def _make_report(self, store: Path) -> bool:
        """Write a missing report.html of a run that has a history; True if one was written."""
        raw = _path_of(self.path)
        if not raw.endswith("/report.html"):
            return False
        try:
            run_dir = resolve(store, raw[: -len("report.html")])
        except Refused:
            return False
        if not (run_dir / "history.jsonl").is_file():
            return False
        try:
            write_report(run_dir)
        except ReportError as e:
            log.warning("cannot write the report of %s: %s", run_dir, e)
            return False
        return True

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


class StoreServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, store: Path, address: tuple[str, int]) -> None:
        self.store = Path(os.path.realpath(store))
        super().__init__(address, StoreHandler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/"


def make_server(store: Path, host: str = "127.0.0.1", port: int = 0) -> StoreServer:
    """A server of store, bound but not yet serving (port 0: any free port; see `.url`)."""
    if not store.is_dir():
        raise ReportError(f"{store}: not a directory")
    return StoreServer(store, (host, port))


def serve(
    store: Path,
    host: str = "127.0.0.1",
    port: int = 8000,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Serve store until interrupted; ready(url) is called once the socket is bound."""
    server = make_server(store, host, port)
    try:
        if ready is not None:
            ready(server.url)
        server.serve_forever()
    except KeyboardInterrupt:
        log.info("stopped")
    finally:
        server.server_close()
