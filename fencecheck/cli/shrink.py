"""The `shrink` command of the CLI (fencecheck/nemesis/shrink.py): reduce a failing run's fault schedule
by delta debugging with real reruns. Exit codes: 0 a schedule was written (smaller or not), 3 a
run folder that cannot be shrunk (one line), 128+n when a signal stopped it."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from fencecheck.cli.group import console
from fencecheck.run.config import ConfigError

BAD_INPUT = 3
out = console()
err = console(stderr=True, soft_wrap=True)


def _fail(message: str) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}", markup=True)
    raise typer.Exit(BAD_INPUT)


def shrink(
    run_dir: Annotated[Path, typer.Argument(help="a run folder that found violations")],
    store: Annotated[Path, typer.Option(help="where the reruns are kept")] = Path("store"),
    out_dir: Annotated[Path | None, typer.Option(
        "--out", help="where the shrunk, replayable schedule goes (default RUN_DIR/shrunk)")]
    = None,
    tries: Annotated[int, typer.Option(min=1, help="reruns of each candidate")] = 3,
    budget: Annotated[float, typer.Option(help="stop after this many seconds")] = 1800.0,
) -> None:
    """Shrink a failing run's fault schedule to a smallest one that finds the same kind."""
    from fencecheck.nemesis.shrink import Shrinker

    if os.geteuid() != 0:
        _fail("fencecheck shrink needs root (it reruns the test); see `fencecheck doctor`")
    target = out_dir or run_dir / "shrunk"
    s = Shrinker(run_dir, store, target, tries=tries, budget_s=budget)
    try:
        s.load()
    except ConfigError as e:
        _fail(str(e))
    out.print(f"{run_dir}: {len(s.steps)} faults, kinds {', '.join(sorted(s.kinds))}; "
              f"{tries} tries per candidate, budget {budget:.0f} s", soft_wrap=True)
    t0 = time.monotonic()
    keep = s.shrink()
    for t in s.log:
        out.print(f"  faults {t['keep']} try {t['try']}: "
                  f"{'same kind found' if t['same_kind'] else 'not found'} ({t['run_dir']})",
                  soft_wrap=True)
    out.print(f"{len(s.steps)} -> {len(keep)} faults (kept steps {keep}) in "
              f"{time.monotonic() - t0:.0f} s; replay with: fencecheck run --replay {target}",
              soft_wrap=True)
    out.print(f"summary: {target / 'shrink.json'}", soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add `shrink` to the CLI."""
    app.command("shrink")(shrink)
