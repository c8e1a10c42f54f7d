"""`python -m fencecheck` is the `fencecheck` command."""

from fencecheck.cli import main

main()
