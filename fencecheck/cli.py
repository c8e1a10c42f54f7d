"""The `fencecheck` command line (typer). Only this module prints to the terminal."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)


@app.command()
def version() -> None:
    """Print the version."""
    from importlib.metadata import version as v

    typer.echo(v("fencecheck"))


def main() -> None:
    app()
