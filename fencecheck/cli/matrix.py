"""The `matrix` command of the CLI: run a TOML matrix of tests with expected outcomes and print
a summary table (see fencecheck/fleet/matrix.py for the file format, fleet/outputs.py for what is
written).

`--shard I/N` runs one machine's part of the matrix and writes its shard.json; `merge` puts the N
shards' results together (exit 3 naming a missing shard). `libraries` prints the published
comparison's matrix, generated from the descriptors (fencecheck/fleet/libraries.py).

Exit codes: 0 every row met its expectation, 1 some row missed it, 3 a bad matrix file or
option (one line naming the file, the row and the field, before anything runs) or a JUnit
file that could not be written, 128+n when a signal stopped the matrix.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.table import Table

from fencecheck.cli.group import console
from fencecheck.fleet.matrix import (
    EXPECTED_VERDICT,
    MatrixError,
    MatrixOutcome,
    Row,
    RunRecord,
    load_matrix,
)
from fencecheck.fleet.runs import auto_jobs, run_matrix
from fencecheck.fleet.shard import parse_shard, select, write_manifest

BAD_INPUT = 3
out = console()
err = console(stderr=True, soft_wrap=True)


def _fail(message: str) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}", markup=True)
    raise typer.Exit(BAD_INPUT)


def _notify(row: Row, seed: int, rec: RunRecord | None) -> None:
    if rec is None:
        out.print(f"[bold]{row.label}[/] seed {seed}: running ({row.expect}) …", soft_wrap=True)
        return
    want = EXPECTED_VERDICT[row.expect]
    mark = "[green]as expected[/]" if rec.verdict == want else "[red]NOT as expected[/]"
    where = f" — {rec.error}" if rec.error else ""
    out.print(f"[bold]{row.label}[/] seed {seed}: {rec.verdict} (exit {rec.exit_code}, "
              f"{rec.duration_s:.1f} s), {mark}{where}", soft_wrap=True)


def _summary(outcome: MatrixOutcome) -> None:
    table = Table(title="fencecheck matrix", show_lines=False)
    for col in ("row", "expect", "runs", "verdicts", "expectation", "report"):
        table.add_column(col, overflow="fold")
    for rr in outcome.rows:
        verdicts = ", ".join(r.verdict for r in rr.runs) or "not run"
        reports = "\n".join(str(r.report or r.run_dir or r.log) for r in rr.runs) or "–"
        table.add_row(rr.row.label, rr.row.expect, f"{len(rr.runs)}/{len(rr.row.seeds)}",
                      verdicts, "[green]met[/]" if rr.met else "[bold red]MISSED[/]", reports)
    out.print(table)
    for rr in outcome.missed:
        want = "violations (exit 1)" if rr.row.expect == "must-find" else "no violation (exit 0)"
        got = ", ".join(f"seed {r.seed}: {r.verdict}" for r in rr.runs) or "not run"
        out.print(f"[bold red]MISSED[/] row {rr.row.label}: {rr.row.expect} wanted {want}; "
                  f"got {got}", soft_wrap=True)
        for r in rr.runs:
            out.print(f"  seed {r.seed} report: {r.report or r.run_dir or r.log}", soft_wrap=True)
    if outcome.compare_html is not None:
        out.print(f"comparison: {outcome.compare_html}", soft_wrap=True)
    else:
        err.print(f"[yellow]warning:[/] no comparison report: {outcome.report_error}")
    if outcome.junit is not None:
        out.print(f"junit:      {outcome.junit}", soft_wrap=True)
    if outcome.junit_error is not None:
        err.print(f"[yellow]warning:[/] no JUnit file: {outcome.junit_error}")
    met = len(outcome.rows) - len(outcome.missed)
    out.print(f"{met}/{len(outcome.rows)} rows met their expectation"
              + (f"; stopped by signal {outcome.interrupted}" if outcome.interrupted else ""))


def matrix(
    file: Annotated[Path, typer.Argument(help="the matrix file (TOML: [defaults], [[row]])")],
    store: Annotated[Path, typer.Option(help="where runs are kept")] = Path("store"),
    junit: Annotated[Path | None, typer.Option(help="write JUnit XML here, one case per run")]
    = None,
    out_dir: Annotated[Path | None, typer.Option(
        "--out", help="where compare.html/.csv, matrix.json and run logs go "
                      "(default STORE/_matrix/<time>)")] = None,
    only: Annotated[list[str] | None, typer.Option(
        help="run only these rows (by name; repeat or comma-separate)")] = None,
    shard: Annotated[str | None, typer.Option(
        help="run only shard I/N (I in 0..N-1) of the rows x seeds, balanced by expected "
             "time; merge the N shards with `fencecheck merge`")] = None,
    jobs: Annotated[str, typer.Option(
        help="runs at once, in weight units (a redis run is 1, etcd and ZooKeeper 2, "
             "kubernetes 3, a JVM client +1); `auto`: three per core. Results are the same as "
             "one after another")] = "1",
    verbose: Annotated[bool, typer.Option("-v", "--verbose", help="log to stderr")] = False,
) -> None:
    """Run a matrix of tests, each row expected to find violations or to pass."""
    if verbose:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        n_jobs = parse_jobs(jobs)
        spec = load_matrix(file, store, only or ())
        part = parse_shard(shard) if shard is not None else None
    except MatrixError as e:
        _fail(str(e))
    if part is not None:
        if only:
            _fail("--shard and --only: shard the whole matrix (every shard must cut the same one)")
        spec = select(spec, part)
    if os.geteuid() != 0:
        _fail("fencecheck matrix needs root (network namespaces, iptables); "
              "see `fencecheck doctor`")
    out_dir = out_dir or store / "_matrix" / time.strftime("%Y%m%dT%H%M%S")
    runs = sum(len(r.seeds) for r in spec.rows)
    which = f" (shard {part})" if part is not None else ""
    at_once = f", {n_jobs} weight units at once" if n_jobs > 1 else ""
    n_rows = len(spec.rows)
    out.print(f"{file}{which}: {n_rows} row{'s' if n_rows != 1 else ''}, {runs} "
              f"run{'s' if runs != 1 else ''}{at_once}; output in {out_dir}", soft_wrap=True)
    try:
        outcome = run_matrix(spec, out_dir, junit, _notify, jobs=n_jobs)
        if part is not None:
            write_manifest(outcome, spec, part)
    except OSError as e:
        _fail(f"{e.filename or out_dir}: {e.strerror or e}")
    _summary(outcome)
    raise typer.Exit(outcome.exit_code)


def parse_jobs(text: str) -> int:
    """--jobs: a whole number from 1, or `auto`."""
    if text.strip().lower() == "auto":
        return auto_jobs()
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise MatrixError(f"--jobs: {text!r}: want a whole number from 1, or auto")
    return n


def merge(
    file: Annotated[Path, typer.Argument(help="the matrix file the shards ran")],
    paths: Annotated[list[Path], typer.Argument(
        help="the shards' stores or output folders (each holds a shard.json)")],
    out_dir: Annotated[Path, typer.Option(
        "--out", help="where compare.html/.csv and matrix.json go")] = Path("merged"),
    junit: Annotated[Path | None, typer.Option(help="write JUnit XML here, one case per run")]
    = None,
) -> None:
    """Merge the shards of a matrix into its one comparison, JUnit file and exit code."""
    from fencecheck.fleet.shard import merge_shards

    try:
        spec = load_matrix(file, Path("store"), runnable=False)
        outcome = merge_shards(spec, paths, out_dir, junit)
    except MatrixError as e:
        _fail(str(e))
    except OSError as e:
        _fail(f"{e.filename or out_dir}: {e.strerror or e}")
    _summary(outcome)
    raise typer.Exit(outcome.exit_code)


def libraries(
    out_file: Annotated[Path | None, typer.Option(
        "--out", help="write it here (default: print it)")] = None,
) -> None:
    """Print the published comparison's matrix (examples/libraries.toml), generated from every
    installed client's comparison scenarios; run it with `fencecheck matrix`."""
    from fencecheck.descriptors.catalog import CatalogError
    from fencecheck.fleet.libraries import render

    try:
        text = render()
    except CatalogError as e:
        _fail(str(e))
    if out_file is None:
        typer.echo(text, nl=False)
        return
    try:
        out_file.write_text(text, encoding="utf-8")
    except OSError as e:
        _fail(f"{out_file}: {e.strerror or e}")
    out.print(f"wrote {out_file}", soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add `matrix`, `merge` and `libraries` to the CLI."""
    app.command("matrix")(matrix)
    app.command("merge")(merge)
    app.command("libraries")(libraries)
