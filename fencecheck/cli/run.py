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
from fencecheck.cli.group import shown
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


def _owner_help(owner: str, what: str) -> str:
    """An --<owner>-opt's help: what it sets and every owner's options, from their models."""
    from fencecheck.run.options import help_text

    try:
        listed = help_text(owner)
    except catalog.CatalogError:
        listed = "see `fencecheck plugins`"
    return (f"{what} (repeatable; VALUE parsed as JSON where it can be). "
            + (listed or f"(no {owner} declares any yet)"))


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


def _fault_options(items: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for key, value in _options(items, "--fault-opt").items():
        fault, dot, field = key.partition(".")
        if not dot or not fault or not field:
            fail(f"bad configuration: --fault-opt: expected FAULT.KEY=VALUE, got {key!r}")
        out.setdefault(fault, {})[field] = value
    return out


def _with_delay(given: dict[str, dict[str, Any]], delay: str | None) -> dict[str, dict[str, Any]]:
    """--pause-delay as the pause fault's delay_s (an explicit --fault-opt pause.delay_s wins)."""
    if delay is not None:
        given.setdefault("pause", {}).setdefault("delay_s", delay)
    return given


def _pair(value: str | None, option: str) -> tuple[float, float] | None:
    if value is None:
        return None
    try:
        lo, _, hi = value.partition(",")
        return (float(lo), float(hi or lo))
    except ValueError:
        fail(f"bad configuration: {option}: expected LOW,HIGH in seconds, got {value!r}")


ALIAS = "Shorthands (each sets one owner's option)"


def run(
    backend: Annotated[str, typer.Option(help=_names(catalog.backends))] = "redis",
    client: Annotated[str | None, typer.Option(help="lock client (default per backend) or module:Class")] = None,
    resource: Annotated[str, typer.Option(help=_names(catalog.resources))] = "store",
    client_cmd: Annotated[str | None, typer.Option("--client-cmd", help="your own lock client: a program speaking JSON lines on stdin/stdout (docs/client-protocol.md)")] = None,
    workload: Annotated[str, typer.Option(help=_names(catalog.workloads))] = "lock",
    nemesis: Annotated[str, typer.Option(help="comma-separated: none, " + _names(faults))] = "pause",
    fencing: Annotated[str, typer.Option(help="on: the resource rejects stale tokens; off: accepts all")] = "off",
    time_limit: Annotated[float, typer.Option("--time-limit", help="seconds of workload")] = 30.0,
    concurrency: Annotated[int, typer.Option(help="client worker processes")] = 5,
    lease_ms: Annotated[int, typer.Option(help="lock lease (TTL) in ms")] = 2000,
    seed: Annotated[int, typer.Option(help="seed of the fault schedule and workers")] = 0,
    store: Annotated[Path, typer.Option(help="where runs are kept")] = Path("store"),
    name: Annotated[str | None, typer.Option(help="test name (default from the options)")] = None,
    nodes: Annotated[int | None, typer.Option(help="server nodes (default per backend)")] = None,
    locks: Annotated[int, typer.Option(help="number of locks (each with its counter)")] = 1,
    interval: Annotated[str | None, typer.Option(help="seconds between faults, LOW,HIGH")] = None,
    fault_duration: Annotated[str | None, typer.Option(help="seconds every fault lasts, LOW,HIGH")] = None,
    runtime: Annotated[str, typer.Option(help="where nodes come from: " + _names(catalog.runtimes))] = "netns",
    backend_opt: Annotated[list[str] | None, typer.Option("--backend-opt", metavar="KEY=VALUE", help=_owner_help("backend", "the backend's own options"))] = None,
    client_opt: Annotated[list[str] | None, typer.Option("--client-opt", metavar="KEY=VALUE", help=_owner_help("client", "for the lock client; a client that declares no model takes any key"))] = None,
    resource_opt: Annotated[list[str] | None, typer.Option("--resource-opt", metavar="KEY=VALUE", help=_owner_help("resource", "the resource's own options"))] = None,
    runtime_opt: Annotated[list[str] | None, typer.Option("--runtime-opt", metavar="KEY=VALUE", help=_owner_help("runtime", "the runtime's own options"))] = None,
    workload_opt: Annotated[list[str] | None, typer.Option("--workload-opt", metavar="KEY=VALUE", help=_owner_help("workload", "the workload's own options"))] = None,
    fault_opt: Annotated[list[str] | None, typer.Option("--fault-opt", metavar="FAULT.KEY=VALUE", help=_owner_help("fault", "one fault's own options, for a fault of --nemesis"))] = None,
    persistence: Annotated[str | None, typer.Option(help="= --backend-opt persistence (redis: off, everysec, always)", rich_help_panel=ALIAS)] = None,
    pause_target: Annotated[str | None, typer.Option(help="= --fault-opt F.target for every fault F of the run: holder, random, or server (pause; the others random)", rich_help_panel=ALIAS)] = None,
    pause_delay: Annotated[str | None, typer.Option(help="= --fault-opt pause.delay_s (seconds after the fresh grant a holder pause starts, LOW,HIGH, drawn uniformly; default 0: at once)", rich_help_panel=ALIAS)] = None,
    think_ms: Annotated[float | None, typer.Option(help="= --workload-opt think_ms (think time inside the critical section)", rich_help_panel=ALIAS)] = None,
    writes: Annotated[int | None, typer.Option("--writes", help="= --workload-opt writes_per_section (read/write rounds per critical section)", rich_help_panel=ALIAS)] = None,
    renew: Annotated[bool | None, typer.Option(help="= --workload-opt renew=true (renew leases while holding)", rich_help_panel=ALIAS)] = None,
    idempotent: Annotated[bool | None, typer.Option(help="= --workload-opt idempotent=true (cron: the resource deduplicates by job id)", rich_help_panel=ALIAS)] = None,
    subnet: Annotated[str | None, typer.Option(help="= --runtime-opt subnet (netns, docker: address range of the nodes)", rich_help_panel=ALIAS)] = None,
    hosts: Annotated[str | None, typer.Option(help="= --runtime-opt hosts (ssh: h1,h2,..., servers first)", rich_help_panel=ALIAS)] = None,
    ssh_user: Annotated[str | None, typer.Option(help="= --runtime-opt user (ssh: login user)", rich_help_panel=ALIAS)] = None,
    ssh_key: Annotated[Path | None, typer.Option(help="= --runtime-opt key (ssh: private key file)", rich_help_panel=ALIAS)] = None,
    ssh_port: Annotated[int | None, typer.Option(help="= --runtime-opt port (ssh: port)", rich_help_panel=ALIAS)] = None,
    sudo: Annotated[bool | None, typer.Option(help="= --runtime-opt sudo=true (ssh: run commands through sudo)", rich_help_panel=ALIAS)] = None,
    ssh_accept_unknown: Annotated[bool | None, typer.Option(help="= --runtime-opt accept_unknown=true (ssh: accept unknown host keys, insecure)", rich_help_panel=ALIAS)] = None,
    known_hosts: Annotated[Path | None, typer.Option(help="= --runtime-opt known_hosts (ssh: known_hosts file to verify against)", rich_help_panel=ALIAS)] = None,
    junit: Annotated[Path | None, typer.Option(help="also write a JUnit XML file")] = None,
    replay: Annotated[Path | None, typer.Option(help="rerun this run directory's (or a shipped finding's, examples/findings/NAME) configuration with exactly its fault schedule (other options but --store are ignored)")] = None,
    verbose: Annotated[bool, typer.Option("-v", "--verbose", help="log to stderr")] = False,
) -> None:
    """Run one test end to end and check it."""
    _execute(dict(locals()))


# The shorthands, as RunConfig's aliases of earlier releases (fencecheck/run/options.py: LEGACY).
_SHORTHANDS = ("persistence", "pause_target", "think_ms", "renew", "idempotent", "subnet",
               "ssh_user", "ssh_key", "ssh_port", "sudo", "ssh_accept_unknown", "known_hosts")


def _config(a: dict[str, Any]) -> RunConfig:
    """The RunConfig of run's arguments (ConfigError naming the field)."""
    from fencecheck.run.config import make_config

    if a["fencing"] not in ("on", "off"):
        fail(f"bad configuration: fencing: expected on or off, got {a['fencing']!r}")
    legacy = {k: a[k] for k in _SHORTHANDS if a[k] is not None}
    if a["writes"] is not None:
        legacy["writes_per_section"] = a["writes"]
    if a["hosts"] is not None:
        legacy["hosts"] = tuple(h.strip() for h in a["hosts"].split(",") if h.strip())
    return make_config(
        backend=a["backend"], client=a["client"], client_cmd=a["client_cmd"],
        resource=a["resource"], workload=a["workload"],
        nemesis=tuple(x.strip() for x in a["nemesis"].split(",") if x.strip()),
        fencing=a["fencing"] == "on", time_limit_s=a["time_limit"],
        concurrency=a["concurrency"], lease_ms=a["lease_ms"], seed=a["seed"], store=a["store"],
        name=a["name"], nodes=a["nodes"], locks=a["locks"],
        nemesis_interval_s=_pair(a["interval"], "--interval"),
        fault_duration_s=_pair(a["fault_duration"], "--fault-duration"), runtime=a["runtime"],
        backend_options=_options(a["backend_opt"] or [], "--backend-opt"),
        client_options=_options(a["client_opt"] or [], "--client-opt"),
        resource_options=_options(a["resource_opt"] or [], "--resource-opt"),
        runtime_options=_options(a["runtime_opt"] or [], "--runtime-opt"),
        workload_options=_options(a["workload_opt"] or [], "--workload-opt"),
        fault_options=_with_delay(_fault_options(a["fault_opt"] or []), a["pause_delay"]),
        **legacy,
    )


def _execute(a: dict[str, Any]) -> None:
    from fencecheck.clusters.base import ClusterError
    from fencecheck.run.config import ConfigError, OptionError
    from fencecheck.run.controller import run as run_test
    from fencecheck.run.progress import ProgressLine
    from fencecheck.run.store import StoreError
    from fencecheck.workloads.base import WorkloadError

    if a["verbose"]:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        cfg = _config(a)
        if a["replay"] is not None:
            cfg = _replayed(a["replay"], a["store"])
        _preflight(cfg)
        with ProgressLine(err) as line:
            outcome = run_test(cfg, line.update)
    except OptionError as e:
        fail(e.flag_message())
    except ConfigError as e:
        fail(_as_option(e))
    except (StoreError, ClusterError, WorkloadError, CheckerError) as e:
        fail(str(e))
    _print_outcome(outcome, a["junit"])
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
        err.print(f"[yellow]note:[/] {shown(folder)} was recorded on other versions than "
                  f"these ({shown('; '.join(differ))}): a replay that finds nothing may be the "
                  "change", soft_wrap=True)
    return cfg


def _preflight(cfg: RunConfig) -> None:
    """What must hold before a run starts: warned of what its options' models warn of
    (unverified host keys), refused without root."""
    from fencecheck.run.options import warnings

    for text in warnings(cfg):
        err.print(f"[bold yellow]warning:[/] {shown(text)}", soft_wrap=True)
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
