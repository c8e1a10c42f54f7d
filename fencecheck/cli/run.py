"""The `run` command of the CLI: one test end to end (fencecheck/run/controller.py), its summary and
exit code. A module of its own because its option help names every backend, resource and fault,
which imports the descriptors and the fault plugins: `check` must not pay for that."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fencecheck.checker.base import CheckerError
from fencecheck.cli.app import err, fail, out, print_summary
from fencecheck.descriptors import catalog
from fencecheck.nemesis.faults.registry import faults

if TYPE_CHECKING:
    from fencecheck.run.config import RunConfig
    from fencecheck.run.controller import RunOutcome
    from fencecheck.run.errors import ConfigError


def _names(table: Callable[[], Mapping[str, object]]) -> str:
    """The names for --help; a broken plugin is reported when it is used, not here."""
    try:
        return ", ".join(table())
    except catalog.CatalogError:
        return "see `fencecheck plugins`"


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
    pause_delay: Annotated[str | None, typer.Option(help="seconds after the fresh grant a holder pause starts, LOW,HIGH, drawn uniformly (default 0: at once)")] = None,
    think_ms: Annotated[float, typer.Option(help="think time inside the critical section")] = 20.0,
    writes: Annotated[int, typer.Option("--writes", help="read/write rounds per critical section")] = 3,
    locks: Annotated[int, typer.Option(help="number of locks (each with its counter)")] = 1,
    renew: Annotated[bool, typer.Option(help="renew leases while holding")] = False,
    interval: Annotated[str | None, typer.Option(help="seconds between faults, LOW,HIGH")] = None,
    fault_duration: Annotated[str | None, typer.Option(help="seconds a fault lasts, LOW,HIGH")] = None,
    subnet: Annotated[str | None, typer.Option(help="address range of the nodes (default: netns 10.77.0.0/24, private to the run; docker a free /24 of 10.96.0.0/12)")] = None,
    runtime: Annotated[str, typer.Option(help="where nodes come from: netns, docker or ssh")] = "netns",
    hosts: Annotated[str | None, typer.Option(help="ssh runtime: h1,h2,... (servers first)")] = None,
    ssh_user: Annotated[str, typer.Option(help="ssh runtime: login user")] = "root",
    ssh_key: Annotated[Path | None, typer.Option(help="ssh runtime: private key file")] = None,
    ssh_port: Annotated[int, typer.Option(help="ssh runtime: port")] = 22,
    sudo: Annotated[bool, typer.Option(help="ssh runtime: run commands through sudo")] = False,
    ssh_accept_unknown: Annotated[bool, typer.Option(help="ssh runtime: accept unknown host keys (insecure)")] = False,
    known_hosts: Annotated[Path | None, typer.Option(help="ssh runtime: known_hosts file to verify against")] = None,
    junit: Annotated[Path | None, typer.Option(help="also write a JUnit XML file")] = None,
    replay: Annotated[Path | None, typer.Option(help="rerun this run directory's (or a shipped finding's, examples/findings/NAME) configuration with exactly its fault schedule (other options but --store are ignored)")] = None,
    verbose: Annotated[bool, typer.Option("-v", "--verbose", help="log to stderr")] = False,
) -> None:
    """Run one test end to end and check it."""
    from fencecheck.clusters.base import ClusterError
    from fencecheck.run.config import ConfigError, make_config
    from fencecheck.run.controller import run as run_test
    from fencecheck.run.progress import ProgressLine
    from fencecheck.run.store import StoreError
    from fencecheck.workloads.base import WorkloadError

    if fencing not in ("on", "off"):
        fail(f"bad configuration: fencing: expected on or off, got {fencing!r}")
    if verbose:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        cfg = make_config(
            backend=backend, client=client, client_cmd=client_cmd, resource=resource,
            workload=workload, client_options=_options(client_opt or [], "--client-opt"),
            idempotent=idempotent, pause_delay_s=_pair(pause_delay, "--pause-delay"),
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
            cfg = _replayed(replay, store)
        _preflight(cfg)
        with ProgressLine(err) as line:
            outcome = run_test(cfg, line.update)
    except ConfigError as e:
        fail(_as_option(e))
    except (StoreError, ClusterError, WorkloadError, CheckerError) as e:
        fail(str(e))
    _print_outcome(outcome, junit)
    raise typer.Exit(outcome.exit_code)


# RunConfig fields whose option is not named after them (the rest: `lease_ms` is --lease-ms,
# `time_limit_s` is --time-limit)
_OPTION_OF = {"writes_per_section": "writes", "nemesis_interval_s": "interval",
              "client_options": "client_opt"}


def _as_option(e: ConfigError) -> str:
    """The error naming the option the user typed (--lease-ms), not the config field
    (lease_ms)."""
    text = str(e)
    click = typer.core.click  # type: ignore[attr-defined]
    ctx = click.get_current_context(silent=True)
    if e.field is None or ctx is None or not text.startswith(f"bad configuration: {e.field}:"):
        return text
    options = {p.name: p.opts[0] for p in ctx.command.params if p.opts}
    for name in (_OPTION_OF.get(e.field), e.field, e.field.removesuffix("_s")):
        if name in options and options[name].startswith("--"):
            return text.replace(f": {e.field}:", f": {options[name]}:", 1)
    return text


def _replayed(folder: Path, store: Path) -> RunConfig:
    """The replayed configuration; says which versions the recording had that differ here."""
    from fencecheck.nemesis.replay import drift, recorded_versions, replay_config

    cfg = replay_config(folder, store)
    differ = drift(cfg, recorded_versions(folder))
    if differ:
        err.print(f"[yellow]note:[/] {folder} was recorded on other versions than these "
                  f"({'; '.join(differ)}): a replay that finds nothing may be the change")
    return cfg


def _preflight(cfg: RunConfig) -> None:
    """What must hold before a run starts: warned of unverified host keys, refused without
    root."""
    if cfg.ssh_accept_unknown:
        err.print("[bold yellow]warning:[/] --ssh-accept-unknown: host keys are NOT verified; "
                  "anyone on the path can impersonate the nodes")
    if os.geteuid() != 0:
        fail("fencecheck run needs root (network namespaces, iptables); see `fencecheck doctor`")


def _print_outcome(outcome: RunOutcome, junit: Path | None) -> None:
    """The run's summary, where its files are, and the JUnit file if asked for."""
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


def register(app: typer.Typer) -> None:
    app.command()(run)
