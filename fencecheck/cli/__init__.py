"""The `fencecheck` command line: the typer app (`app`), its command group (`group`), one module
per command family (`run`, `matrix`, `shrink`, `reports`, `plugins`, `doctor`). Only this
package, and the run's live progress line (fencecheck/run/progress.py), print to the terminal."""

from __future__ import annotations


def main() -> None:
    """The console script (kept at `fencecheck.cli:main`; the app is imported only when run)."""
    from fencecheck.cli.app import main as app_main

    app_main()
