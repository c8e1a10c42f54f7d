"""The `nats-server` binary of the `nats` backend: built from the Go module proxy at the pinned
release `PIN`, cached per machine.

Why not Debian's 2.9.10: on a 3-server cluster it accepts two KV updates expecting the same
last revision when they arrive together (measured: 17 of 100 rounds of three concurrent
`update(last=rev)` had more than one accepted; tests/clusters/test_nats.py keeps the check), so
two clients are granted one lock with no fault at all. The pinned release refuses all but one.

`fencecheck build nats-server` (or `python -m fencecheck.clusters.services.nats_build`) builds
it into `$FENCECHECK_CLIENT_CACHE` (default /var/cache/fencecheck/clients)/nats-server-<PIN>/
with `go install`, which checks the module against its checksum; an unchanged pin is a no-op.
`binary()` is the path of the built binary, or `NotBuilt` naming the command that builds it
(the backend's preflight turns that into exit 3 before a run starts).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from fencecheck.clusters.base import ClusterError
from fencecheck.toolchain import cache

MODULE = "github.com/nats-io/nats-server/v2"
PIN = "v2.15.3"
BUILD_HINT = "fencecheck build nats-server"
TOOLCHAIN = "go"  # fencecheck.toolchain.tools
NAME = "nats-server"


class NotBuilt(ClusterError):
    """nats-server is not in the cache."""


def label() -> str:
    """The name and pinned release, as `fencecheck build` and test.json show it."""
    return f"{NAME} {PIN}"


def source() -> str:
    """What the build is made from, for `fencecheck build --dry-run`."""
    return f"{MODULE}@{PIN} (the Go module proxy)"


def build_dir() -> Path:
    # "static": built with GO_STATIC (fencecheck.toolchain.tools), as the release binaries are.
    return cache.cache_root() / f"{NAME}-{PIN}-static"


def binary() -> Path:
    """The built nats-server; NotBuilt (with the command that builds it) if there is none."""
    d = build_dir()
    if not cache.is_built(d):
        raise NotBuilt(f"nats-server {PIN} is not built (looked in {d}); build it with: "
                       f"{BUILD_HINT}")
    return d / NAME


def _fill(folder: Path) -> None:
    """Nothing to copy: `go install module@version` fetches the release itself."""


def steps(folder: Path) -> list[list[str]]:
    return [["env", f"GOBIN={folder}", "go", "install", "-trimpath", f"{MODULE}@{PIN}"]]


def build() -> tuple[Path, bool]:
    """Build unless the cache has it. Returns (binary, whether it built)."""
    final = build_dir()
    return final / NAME, cache.run(final, NAME, _fill, steps, ClusterError)


def main(argv: Sequence[str] | None = None) -> int:
    return cache.build_main("python -m fencecheck.clusters.services.nats_build", __doc__,
                            label(), build, (ClusterError,), argv)


if __name__ == "__main__":
    sys.exit(main())
