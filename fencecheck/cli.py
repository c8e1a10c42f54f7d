"""The `fencecheck` command line (typer). Only this package prints to the terminal.

Exit codes of `run` and `check`: 0 valid, 1 violations found, 2 unknown, 3 bad input or setup.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console

from fencecheck.checker.base import CheckerError, Results
from fencecheck.cli_group import LazyGroup, shown
from fencecheck.descriptors import catalog
from fencecheck.faults.registry import faults


def _names(table: Callable[[], Mapping[str, object]]) -> str:
    """The names for --help; a broken plugin is reported when it is used, not here."""
    try:
        return ", ".join(table())
    except catalog.CatalogError:
        return "see `fencecheck plugins`"


app = typer.Typer(
    cls=LazyGroup,  # matrix and the report commands are imported only when used
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Jepsen-style black-box tests of distributed locks and leader leases.",
)
out = Console(highlight=False)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version as v

        out.print(f"fencecheck {v('fencecheck')}")
        raise typer.Exit(0)


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="print the version and exit")] = False,
          ) -> None:
    """Jepsen-style black-box tests of distributed locks and leader leases."""
err = Console(stderr=True, highlight=False)

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
    console.print(_verdict_text(results.valid))
    n_inc = len(results.incidents)
    n_vio = results.violation_count
    if n_inc or n_vio:
        console.print(f"  {n_inc} incident{'s' if n_inc != 1 else ''}, "
                      f"{n_vio} violation{'s' if n_vio != 1 else ''}")
    for inc in results.incidents[:5]:
        console.print(f"  [bold]incident {inc['id']}[/]: {shown(inc['story'])}", soft_wrap=True)
    if len(results.incidents) > 5:
        console.print(f"  … and {len(results.incidents) - 5} more incidents (see results.json)")
    reason = results.stats.get("unknown_reason")
    if results.valid == "unknown" and reason:
        console.print(f"  why: {shown(str(reason))}", soft_wrap=True)
    for name, check in results.checks.items():
        mark = ("[dim]skipped[/]" if check.skipped and check.valid is True
                else "[green]ok[/]" if check.valid is True
                else "[red]violated[/]" if check.valid is False else "[yellow]unknown[/]")
        note = f": {shown(check.skipped)}" if check.skipped else ""
        count = check.details.get("count", len(check.violations))
        extra = f" — {count} violation(s)" if check.violations else ""
        console.print(f"  {name:<13} {mark}{extra}{note}")
        if "duplicate_rate" in check.details:
            d = check.details
            console.print(f"    {d.get('jobs_executed_more_than_once', 0)} of "
                          f"{d.get('jobs_executed', 0)} jobs ran more than once "
                          f"({d['duplicate_rate']:.1%}; {d.get('mode', '?')} mode)")
        for v in check.violations[:3]:
            console.print(f"    [red]{shown(v.kind)}[/]: {shown(v.explanation)}", soft_wrap=True)
        if len(check.violations) > 3:
            console.print(f"    … and {count - 3} more (see results.json)")
    stats = results.stats
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
        "--format", help="jsonl, edn or jepsen-log (guessed when not given)")] = None,
    time_limit: Annotated[float | None, typer.Option(
        "--time-limit", help="seconds for the model check; past it the verdict is unknown")] = 60.0,
    junit: Annotated[Path | None, typer.Option(help="also write a JUnit XML file")] = None,
) -> None:
    """Check a history for mutual-exclusion and fencing violations."""
    from fencecheck.checker.verdict import check_history
    from fencecheck.cli_group import one_line_logging

    one_line_logging()

    run_dir: Path | None = None
    try:
        if path.is_dir():
            from fencecheck.rundir_check import history_inside

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
    data = results.to_json()
    text = json.dumps(data, indent=2)
    if run_dir is not None:
        from fencecheck.rundir_check import rewrite

        try:
            warning = rewrite(run_dir, data)
        except OSError as e:
            fail(f"{run_dir}: results not written: {e.strerror or e}")
        if warning is not None:
            err.print(f"[yellow]warning:[/] {shown(warning)}", soft_wrap=True)
    if out_file is not None:
        try:
            out_file.write_text(text + "\n")
        except OSError as e:
            fail(f"--out {out_file}: {e.strerror or e}")
    if junit is not None:
        from fencecheck.reports.junit import write_check_junit

        try:
            write_check_junit(junit, path, run_dir, data)
        except OSError as e:
            fail(f"--junit {junit}: {e.strerror or e}")
    if json_out:
        sys.stdout.write(text + "\n")
    else:
        print_summary(results)
        if run_dir is not None:
            from fencecheck.checker.names import legend, load_names

            named = [o.get("process") for c in data["checks"].values()
                     for v in c.get("violations") or [] for o in v.get("ops") or []]
            if who := legend(load_names(run_dir), named):
                out.print(f"  processes: {shown(who)}", soft_wrap=True)
    raise typer.Exit(results.exit_code)


@app.command()
def schema(
    name: Annotated[str, typer.Argument(help="results (results.json) or history (one line of "
                                             "history.jsonl)")],
) -> None:
    """Print the JSON Schema of results.json or of a history line."""
    from fencecheck.checker.schemas import NAMES
    from fencecheck.checker.schemas import schema as get

    if name not in NAMES:
        fail(f"schema: unknown name {name!r} (one of {', '.join(NAMES)})")
    sys.stdout.write(json.dumps(get(name), indent=2) + "\n")


def _options(items: list[str], option: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            fail(f"bad configuration: {option}: expected KEY=VALUE, got {item!r}")
        try:
            out[key.strip()] = json.loads(raw)
        except ValueError:
            out[key.strip()] = raw
    return out


def _pair(value: str | None, option: str) -> tuple[float, float] | None:
    if value is None:
        return None
    try:
        lo, _, hi = value.partition(",")
        return (float(lo), float(hi or lo))
    except ValueError:
        fail(f"bad configuration: {option}: expected LOW,HIGH in seconds, got {value!r}")


@app.command()
def run(
    backend: Annotated[str, typer.Option(help=_names(catalog.backends))] = "redis",
    client: Annotated[str | None, typer.Option(help="lock client (default per backend) or module:Class")] = None,
    resource: Annotated[str, typer.Option(help=_names(catalog.resources))] = "store",
    client_cmd: Annotated[str | None, typer.Option("--client-cmd", help="your own lock client: a program speaking JSON lines on stdin/stdout (docs/client-protocol.md)")] = None,
    client_opt: Annotated[list[str] | None, typer.Option("--client-opt", help="KEY=VALUE for the lock client (repeatable; VALUE parsed as JSON where it can be)")] = None,
    workload: Annotated[str, typer.Option(help="lock, leader or cron")] = "lock",
    idempotent: Annotated[bool, typer.Option(help="cron: the resource deduplicates by job id")] = False,
    nemesis: Annotated[str, typer.Option(help="comma-separated: none, " + _names(faults))] = "pause",
    fencing: Annotated[str, typer.Option(help="on: the resource rejects stale tokens; off: accepts all")] = "off",
    time_limit: Annotated[float, typer.Option("--time-limit", help="seconds of workload")] = 30.0,
    concurrency: Annotated[int, typer.Option(help="client worker processes")] = 5,
    lease_ms: Annotated[int, typer.Option(help="lock lease (TTL) in ms")] = 2000,
    seed: Annotated[int, typer.Option(help="seed of the fault schedule and workers")] = 0,
    store: Annotated[Path, typer.Option(help="where runs are kept")] = Path("store"),
    name: Annotated[str | None, typer.Option(help="test name (default from the options)")] = None,
    nodes: Annotated[int | None, typer.Option(help="server nodes (default per backend)")] = None,
    persistence: Annotated[str, typer.Option(help="redis: off, everysec, always")] = "off",
    pause_target: Annotated[str, typer.Option(help="holder, random or server")] = "holder",
    think_ms: Annotated[float, typer.Option(help="think time inside the critical section")] = 20.0,
    writes: Annotated[int, typer.Option("--writes", help="read/write rounds per critical section")] = 3,
    locks: Annotated[int, typer.Option(help="number of locks (each with its counter)")] = 1,
    renew: Annotated[bool, typer.Option(help="renew leases while holding")] = False,
    interval: Annotated[str | None, typer.Option(help="seconds between faults, LOW,HIGH")] = None,
    fault_duration: Annotated[str | None, typer.Option(help="seconds a fault lasts, LOW,HIGH")] = None,
    subnet: Annotated[str, typer.Option(help="address range of the nodes")] = "10.77.0.0/24",
    runtime: Annotated[str, typer.Option(help="where nodes come from: netns, docker or ssh")] = "netns",
    hosts: Annotated[str | None, typer.Option(help="ssh runtime: h1,h2,... (servers first)")] = None,
    ssh_user: Annotated[str, typer.Option(help="ssh runtime: login user")] = "root",
    ssh_key: Annotated[Path | None, typer.Option(help="ssh runtime: private key file")] = None,
    ssh_port: Annotated[int, typer.Option(help="ssh runtime: port")] = 22,
    sudo: Annotated[bool, typer.Option(help="ssh runtime: run commands through sudo")] = False,
    ssh_accept_unknown: Annotated[bool, typer.Option(help="ssh runtime: accept unknown host keys (insecure)")] = False,
    known_hosts: Annotated[Path | None, typer.Option(help="ssh runtime: known_hosts file to verify against")] = None,
    junit: Annotated[Path | None, typer.Option(help="also write a JUnit XML file")] = None,
    replay: Annotated[Path | None, typer.Option(help="rerun this run directory's configuration with exactly its fault schedule (other options but --store are ignored)")] = None,
    verbose: Annotated[bool, typer.Option("-v", "--verbose", help="log to stderr")] = False,
) -> None:
    """Run one test end to end and check it."""
    from fencecheck.clusters.base import ClusterError
    from fencecheck.config import ConfigError, make_config
    from fencecheck.controller import run as run_test
    from fencecheck.progress import ProgressLine
    from fencecheck.runstore import StoreError
    from fencecheck.workloads.base import WorkloadError

    if fencing not in ("on", "off"):
        fail(f"bad configuration: fencing: expected on or off, got {fencing!r}")
    if verbose:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        cfg = make_config(
            backend=backend, client=client, client_cmd=client_cmd, resource=resource,
            workload=workload,
            client_options=_options(client_opt or [], "--client-opt"),
            idempotent=idempotent,
            nemesis=tuple(x.strip() for x in nemesis.split(",") if x.strip()),
            fencing=fencing == "on", time_limit_s=time_limit, concurrency=concurrency,
            lease_ms=lease_ms, seed=seed, store=store, name=name, nodes=nodes,
            persistence=persistence, pause_target=pause_target, think_ms=think_ms,
            writes_per_section=writes, locks=locks, renew=renew,
            nemesis_interval_s=_pair(interval, "--interval"),
            fault_duration_s=_pair(fault_duration, "--fault-duration"), subnet=subnet,
            runtime=runtime, hosts=tuple(h.strip() for h in (hosts or "").split(",") if h.strip()),
            ssh_user=ssh_user, ssh_key=ssh_key, ssh_port=ssh_port, sudo=sudo,
            ssh_accept_unknown=ssh_accept_unknown, known_hosts=known_hosts,
        )
        if replay is not None:
            from fencecheck.replay import replay_config

            cfg = replay_config(replay, store)
        if cfg.ssh_accept_unknown:
            err.print("[bold yellow]warning:[/] --ssh-accept-unknown: host keys are NOT verified; "
                      "anyone on the path can impersonate the nodes")
        if os.geteuid() != 0:
            fail("fencecheck run needs root (network namespaces, iptables); see `fencecheck doctor`")
        with ProgressLine(err) as line:
            outcome = run_test(cfg, line.update)
    except (ConfigError, StoreError, ClusterError, WorkloadError, CheckerError) as e:
        fail(str(e))
    if outcome.results is not None:
        print_summary(outcome.results)
    if outcome.interrupted:
        out.print(f"[yellow]interrupted by {outcome.interrupted}[/]: healed, torn down; "
                  "the history so far was checked")
    if outcome.ready_s is not None:
        out.print(f"cluster ready in {outcome.ready_s:.1f} s"
                  + (f"; first violation at {outcome.first_violation_s:.1f} s"
                     if outcome.first_violation_s is not None else ""))
    out.print(f"run directory: {outcome.run_dir}")
    report = outcome.run_dir / "report.html"
    if report.exists():
        out.print(f"report:        {report}")
    if junit is not None:
        try:
            from fencecheck.reports.junit import write_junit

            write_junit([outcome.run_dir], junit, suite="fencecheck run")
        except (ImportError, OSError) as e:
            err.print(f"[yellow]warning:[/] no JUnit file written: {e}")
    raise typer.Exit(outcome.exit_code)


@app.command()
def teardown(
    run_id: Annotated[str | None, typer.Option("--run", help="the run id (6 hex digits)")] = None,
    all_runs: Annotated[bool, typer.Option("--all", help="every run this machine knows of")] = False,
) -> None:
    """Remove what a killed run left behind (namespaces, processes, rules), by recorded names."""
    from fencecheck.clusters.base import ClusterError
    from fencecheck.clusters.cleaner import teardown_all, teardown_run

    for runtime in ("fencecheck.clusters.runtimes.docker", "fencecheck.clusters.runtimes.ssh"):  # they register their undo kinds
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
    from fencecheck.doctor import diagnose

    problems = 0
    for item in diagnose():
        mark = ("[green]ok[/]  " if item.ok else "[yellow]missing (optional)[/]"
                if item.optional else "[red]MISSING[/]")
        out.print(f"{mark} {item.what}: {item.detail}", soft_wrap=True)
        if not item.ok and item.fix:
            out.print(f"      fix: [bold]{item.fix}[/]", soft_wrap=True)
        if not item.ok and not item.optional:
            problems += 1
    raise typer.Exit(1 if problems else 0)


@app.command()
def version() -> None:
    """Print the version."""
    from importlib.metadata import version as v

    out.print(v("fencecheck"))


def main() -> None:
    try:
        app()
    except catalog.CatalogError as e:  # a broken plugin: one line, not a traceback
        err.print(f"[bold red]error:[/] {e}", soft_wrap=True)
        sys.exit(BAD_INPUT)
