"""`python -m fencecheck` is the `fencecheck` command."""

from fencecheck.cli.app import main

main()
