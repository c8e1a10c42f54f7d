"""The report commands of the CLI: `report`, `compare` and `serve` (see `register`).

Bad input (a directory that is not a run, a malformed history, an unwritable output) is one clear
line on stderr and exit code 3, never a traceback.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from fencecheck.checker.base import CheckerError
from fencecheck.cli.group import console, shown
from fencecheck.reports.rundata import ReportError

BAD_INPUT = 3
out = console()
err = console(stderr=True, soft_wrap=True)


def _fail(message: str) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}", markup=True, highlight=False)
    raise typer.Exit(BAD_INPUT)


def _oserror(e: OSError) -> str:
    where = f"{e.filename}: " if e.filename else ""
    return where + (e.strerror or str(e))


def report(
    run_dir: Annotated[Path, typer.Argument(help="a run directory holding history.jsonl")],
) -> None:
    """Write RUN_DIR/report.html (plotly's JS goes to the store's _static/)."""
    from fencecheck.reports.html import write_report

    try:
        path = write_report(run_dir)
    except (ReportError, CheckerError) as e:
        _fail(str(e))
    except OSError as e:
        _fail(_oserror(e))
    out.print(str(path), markup=False)


def compare(
    paths: Annotated[list[Path], typer.Argument(help="stores or run directories")],
    out_dir: Annotated[Path, typer.Option("--out", help="where compare.html/.csv go")] = Path(
        "compare"
    ),
    junit: Annotated[
        Path | None, typer.Option("--junit", help="also write JUnit XML, one case per run")
    ] = None,
    expect: Annotated[list[str] | None, typer.Option(
        "--expect", help="TEST=must-find or TEST=must-pass: what a test's runs must show "
        "(repeatable)")] = None,
) -> None:
    """Compare runs: backend × client × resource × workload × nemesis × fencing."""
    from fencecheck.reports.compare import EXPECTED_VERDICT
    from fencecheck.reports.compare import compare as do_compare
    from fencecheck.reports.junit import write_junit
    from fencecheck.reports.rundata import find_runs

    expectations: dict[str, str] = {}
    for item in expect or []:
        name, sep, what = item.rpartition("=")
        if not sep or not name or what not in EXPECTED_VERDICT:
            _fail(f"--expect: expected TEST=must-find or TEST=must-pass, got {item!r}")
        expectations[name] = what
    try:
        html_path, csv_path = do_compare(paths, out_dir, expectations=expectations)
        if junit is not None:
            write_junit(find_runs(paths), junit, suite="fencecheck", expectations=expectations)
    except (ReportError, CheckerError) as e:
        _fail(str(e))
    except OSError as e:
        _fail(_oserror(e))
    out.print(str(html_path), markup=False)
    out.print(str(csv_path), markup=False)
    if junit is not None:
        out.print(str(junit), markup=False)


def serve(
    store: Annotated[Path, typer.Argument(help="the store to show")] = Path("store"),
    host: Annotated[str, typer.Option(help="address to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to bind (0: any free port)", min=0, max=65535)] = 8000,
) -> None:
    """Serve a store's runs, reports and logs to a local browser (Ctrl-C stops)."""
    from fencecheck.reports.serve import serve as do_serve

    def ready(url: str) -> None:
        out.print(f"serving {store} at {url} (Ctrl-C to stop)", markup=False)

    def warn(text: str) -> None:
        err.print(f"[bold yellow]warning:[/] {shown(text)}", markup=True, highlight=False)

    try:
        do_serve(store, host, port, ready=ready, warn=warn)
    except ReportError as e:
        _fail(str(e))
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            _fail(f"{host}:{port} is already in use (try --port 0)")
        _fail(_oserror(e))


def register(app: typer.Typer) -> None:
    """Add `report`, `compare` and `serve` to the CLI."""
    app.command("report")(report)
    app.command("compare")(compare)
    app.command("serve")(serve)
