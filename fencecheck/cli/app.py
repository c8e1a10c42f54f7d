"""The `fencecheck` command line (typer). Only this package prints to the terminal.

Exit codes of `run` and `check`: 0 valid, 1 violations found, 2 unknown, 3 bad input or setup.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from msgspec import UNSET
from rich.console import Console

from fencecheck.checker.base import CheckerError, Results
from fencecheck.cli import group
from fencecheck.cli.group import LazyGroup, console, shown
from fencecheck.descriptors.base import CatalogError

app = typer.Typer(
    cls=LazyGroup,  # run, matrix and the report commands are imported only when used
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Jepsen-style black-box tests of distributed locks and leader leases.",
)
out = console()


def _version_line() -> str:
    """What `--version` and `version` both print."""
    from importlib.metadata import version as v

    return f"fencecheck {v('fencecheck')}"


def _version(value: bool) -> None:
    if value:
        out.print(_version_line())
        raise typer.Exit(0)


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="print the version and exit")] = False,
          ) -> None:
    """Jepsen-style black-box tests of distributed locks and leader leases."""
err = console(stderr=True)

BAD_INPUT = 3


def fail(message: str, code: int = BAD_INPUT) -> NoReturn:
    err.print(f"[bold red]error:[/] {shown(message)}", soft_wrap=True)
    raise typer.Exit(code)


def _verdict_text(valid: Any) -> str:
    if valid is True:
        return "[bold green]VALID[/]: no violation found"
    if valid is False:
        return "[bold red]INVALID[/]: violations found"
    return "[bold yellow]UNKNOWN[/]: the checks could not decide"


def print_summary(results: Results, console: Console = out) -> None:
    rec = results.record()
    console.print(_verdict_text(rec.valid))
    n_inc = len(rec.incidents)
    n_vio = results.violation_count
    if n_inc or n_vio:
        console.print(f"  {n_inc} incident{'s' if n_inc != 1 else ''}, "
                      f"{n_vio} violation{'s' if n_vio != 1 else ''}")
    for inc in rec.incidents[:5]:
        console.print(f"  [bold]incident {inc.id}[/]: {shown(inc.story)}", soft_wrap=True)
    if len(rec.incidents) > 5:
        console.print(f"  … and {len(rec.incidents) - 5} more incidents (see results.json)")
    reason = rec.stats.get("unknown_reason")  # stats: the checker's open table
    if rec.valid == "unknown" and reason:
        console.print(f"  why: {shown(str(reason))}", soft_wrap=True)
    for name, check in rec.checks.items():
        skipped = "" if check.skipped is UNSET else check.skipped
        mark = ("[dim]skipped[/]" if skipped and check.valid is True
                else "[green]ok[/]" if check.valid is True
                else "[red]violated[/]" if check.valid is False else "[yellow]unknown[/]")
        note = f": {shown(skipped)}" if skipped else ""
        count = check.violation_count
        extra = f" — {count} violation(s)" if check.violations else ""
        console.print(f"  {name:<13} {mark}{extra}{note}")
        if "duplicate_rate" in check.extra:  # the jobs check's own measures
            d = check.extra
            console.print(f"    {d.get('jobs_executed_more_than_once', 0)} of "
                          f"{d.get('jobs_executed', 0)} jobs ran more than once "
                          f"({d['duplicate_rate']:.1%}; {d.get('mode', '?')} mode)")
        for v in check.violations[:3]:
            console.print(f"    [red]{shown(v.kind)}[/]: {shown(v.explanation)}", soft_wrap=True)
        if len(check.violations) > 3:
            console.print(f"    … and {count - 3} more (see results.json)")
    stats = rec.stats
    keys = [k for k in ("ops", "indeterminate_ops", "writes_rejected_by_fence",
                        "writes_accepted_after_lease_expired") if k in stats]
    if keys:
        console.print("  stats: " + ", ".join(f"{k}={stats[k]}" for k in keys), soft_wrap=True)


@app.command()
def check(
    path: Annotated[Path, typer.Argument(help="history file, or a run directory")],
    json_out: Annotated[bool, typer.Option("--json", help="print results JSON on stdout")] = False,
    out_file: Annotated[Path | None, typer.Option("--out", help="write results JSON here")] = None,
    max_drift: Annotated[float, typer.Option(help="clock drift allowed on leases")] = 0.01,
    model: Annotated[str | None, typer.Option(
        help="also run the linearizability check with this model: mutex, owner-mutex, "
             "fenced-mutex, register, cas-register")] = None,
    fmt: Annotated[str | None, typer.Option(
        "--format", help="jsonl, json (an array, or `jq .` output), edn or jepsen-log (guessed when not given)")] = None,
    time_limit: Annotated[float | None, typer.Option(
        "--time-limit", help="seconds for the model check; past it the verdict is unknown")] = 60.0,
    junit: Annotated[Path | None, typer.Option(help="also write a JUnit XML file")] = None,
) -> None:
    """Check a history for mutual-exclusion and fencing violations."""
    from fencecheck.checker.verdict import check_history
    from fencecheck.cli.group import one_line_logging

    one_line_logging()

    run_dir: Path | None = None
    try:
        if path.is_dir():
            from fencecheck.run.recheck import history_inside

            run_dir = path
            path = history_inside(run_dir)
        elif not path.exists():
            fail(f"{path}: no such file")
        results = check_history(path, max_drift=max_drift, model=model, fmt=fmt,
                                time_limit_s=time_limit)
    except CheckerError as e:
        fail(str(e))
    except OSError as e:
        fail(f"{path}: {e.strerror or e}")
    if "model_chosen" in results.stats:
        err.print("note: the locks have no leases: also checked them against the mutex "
                  "model (--model to choose another)")
    from fencecheck.records import results as results_record

    rec = results.record()
    text = results_record.encode(rec).decode()
    if run_dir is not None:
        from fencecheck.run.recheck import rewrite

        try:
            warning = rewrite(run_dir, rec)
        except OSError as e:
            fail(f"{run_dir}: results not written: {e.strerror or e}")
        if warning is not None:
            err.print(f"[yellow]warning:[/] {shown(warning)}", soft_wrap=True)
    if out_file is not None:
        try:
            out_file.write_text(text)
        except OSError as e:
            fail(f"--out {out_file}: {e.strerror or e}")
    if junit is not None:
        from fencecheck.reports.junit import write_check_junit

        try:
            write_check_junit(junit, path, run_dir, rec)
        except OSError as e:
            fail(f"--junit {junit}: {e.strerror or e}")
    if json_out:
        sys.stdout.write(text)
    else:
        print_summary(results)
        if run_dir is not None:
            from fencecheck.checker.names import legend, load_names

            named = [o.process for _, v in rec.violations() for o in v.ops]
            if who := legend(load_names(run_dir), named):
                out.print(f"  processes: {shown(who)}", soft_wrap=True)
    raise typer.Exit(results.exit_code)


@app.command()
def schema(
    name: Annotated[str, typer.Argument(help="results (results.json), test (test.json), matrix "
                                             "(matrix.json), schedule (schedule.json), shard "
                                             "(shard.json), history "
                                             "(one line of history.jsonl) or config (a run's "
                                             "configuration, test.json's `config`, with every "
                                             "backend's, client's, resource's, runtime's, "
                                             "workload's and fault's options)")],
) -> None:
    """Print the JSON Schema of results.json, test.json, matrix.json, schedule.json,
    shard.json, a history line or a run's configuration."""
    from fencecheck.checker.schemas import NAMES
    from fencecheck.checker.schemas import schema as get

    if name == "config":
        from fencecheck.run.config import config_schema

        try:
            doc = config_schema()
        except CatalogError as e:
            fail(str(e))
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    if name not in NAMES:
        fail(f"schema: unknown name {name!r} (one of {', '.join((*NAMES, 'config'))})")
    sys.stdout.write(json.dumps(get(name), indent=2) + "\n")


@app.command()
def teardown(
    run_id: Annotated[str | None, typer.Option("--run", help="the run id (6 hex digits)")] = None,
    all_runs: Annotated[bool, typer.Option("--all", help="every run this machine knows of")] = False,
) -> None:
    """Remove what a killed run left behind (namespaces, processes, rules), by recorded names."""
    from fencecheck.clusters.base import ClusterError
    from fencecheck.clusters.cleaner import teardown_all, teardown_run

    for runtime in ("fencecheck.clusters.runtimes.docker", "fencecheck.clusters.runtimes.ssh",
                    "fencecheck.clusters.faults.unsynced_ctl",
                    "fencecheck.clusters.kube.sweep"):  # they register their undo kinds
        with contextlib.suppress(ImportError):
            importlib.import_module(runtime)
    try:
        removed = teardown_run(run_id) if run_id and not all_runs else teardown_all()
    except ClusterError as e:
        fail(str(e))
    for r in removed:
        out.print(f"removed {r}")
    out.print(f"teardown: {len(removed)} thing(s) removed")


@app.command()
def doctor() -> None:
    """Check what runs need on this machine and print the command that fixes each gap."""
    from fencecheck.cli.doctor import diagnose

    problems = 0
    for item in diagnose():
        mark = ("[green]ok[/]  " if item.ok else "[yellow]missing (optional)[/]"
                if item.optional else "[red]MISSING[/]")
        out.print(f"{mark} {shown(item.what)}: {shown(item.detail)}", soft_wrap=True)
        if not item.ok and item.fix:  # "pip install 'fencecheck[run]'": not markup
            out.print(f"      fix: [bold]{shown(item.fix)}[/]", soft_wrap=True)
        if not item.ok and not item.optional:
            problems += 1
    raise typer.Exit(1 if problems else 0)


@app.command()
def version() -> None:
    """Print the version (as --version does)."""
    out.print(_version_line())


def main() -> None:
    group.AS_PROGRAM = True  # this process is the program: it may os._exit (see group.main)
    try:
        app()
    except CatalogError as e:  # a broken plugin: one line, not a traceback
        err.print(f"[bold red]error:[/] {e}", soft_wrap=True)
        sys.exit(BAD_INPUT)
