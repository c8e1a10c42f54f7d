"""`python3 -m fencecheck.descriptors apt`: the Debian packages the built-in backends and
resources declare, one a line (scripts/setup.sh installs them). Runs on a bare python3 from the
checkout: this package needs nothing but the standard library."""

from __future__ import annotations

import sys

from fencecheck.descriptors.catalog import BUILTIN_BACKENDS
from fencecheck.descriptors.resources import RESOURCES


def apt_packages() -> list[str]:
    needs = [n for b in BUILTIN_BACKENDS for n in b.needs]
    needs += [n for r in RESOURCES for n in r.needs]
    return list(dict.fromkeys(p for n in needs for p in n.package.split() if p))


def main(argv: list[str]) -> int:
    if argv != ["apt"]:
        print("usage: python3 -m fencecheck.descriptors apt", file=sys.stderr)
        return 3
    print("\n".join(apt_packages()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
