"""The `kube-apiserver` binary of the `kubernetes` backend: built from the Kubernetes Go modules at
the release pinned in `kube_apiserver_go/go.mod` (every staging module replaced by its matching
v0.x version), cached per machine.

`fencecheck build kube-apiserver` (or `python -m fencecheck.clusters.services.kube_build`) builds
it into `$FENCECHECK_CLIENT_CACHE` (default /var/cache/fencecheck/clients, beside the shipped
clients)/kube-apiserver-<version>-<hash>/, <hash> covering go.mod and go.sum: an unchanged pin is
a no-op. The build goes to a temporary folder renamed into place when complete, so a half-built
binary is never found. `binary()` is the path of the built binary, or `NotBuilt` naming the
command that builds it (the backend's preflight turns that into exit 3 before a run starts).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from fencecheck.clusters.base import ClusterError
from fencecheck.toolchain import cache

MODULE = Path(__file__).resolve().parent / "kube_apiserver_go"
BUILD_HINT = "fencecheck build kube-apiserver"
TOOLCHAIN = "go"  # fencecheck.toolchain.tools
NAME = "kube-apiserver"


class NotBuilt(ClusterError):
    """kube-apiserver is not in the cache."""


def version() -> str:
    """The pinned Kubernetes release (the `require k8s.io/kubernetes` line of go.mod)."""
    m = re.search(r"^require k8s\.io/kubernetes (v\S+)", (MODULE / "go.mod").read_text(), re.M)
    if m is None:
        raise ClusterError(f"{MODULE / 'go.mod'}: no `require k8s.io/kubernetes vX.Y.Z` line")
    return m.group(1)


def label() -> str:
    """The name and pinned release, as `fencecheck build` and test.json show it."""
    return f"{NAME} {version()}"


def source() -> str:
    """What the build is made from, for `fencecheck build --dry-run`."""
    return f"k8s.io/kubernetes {version()} ({MODULE / 'go.mod'})"


def build_dir() -> Path:
    h = hashlib.sha256()
    for f in ("go.mod", "go.sum"):
        h.update((MODULE / f).read_bytes() + b"\0")
    return cache.cache_root() / f"{NAME}-{version()}-{h.hexdigest()[:12]}"


def binary() -> Path:
    """The built kube-apiserver; NotBuilt (with the command that builds it) if there is none."""
    d = build_dir()
    if not cache.is_built(d):
        raise NotBuilt(f"kube-apiserver {version()} is not built (looked in {d}); build it "
                       f"with: {BUILD_HINT}")
    return d / NAME


def _fill(folder: Path) -> None:
    for f in ("go.mod", "go.sum"):
        shutil.copy(MODULE / f, folder / f)


def steps(folder: Path) -> list[list[str]]:
    # The version stamp Kubernetes' own build sets, so that /version names the release.
    stamp = f"-X k8s.io/component-base/version.gitVersion={version()}"
    return [["go", "build", "-mod=readonly", "-trimpath", f"-ldflags={stamp}", "-o",
             str(folder / NAME), "k8s.io/kubernetes/cmd/kube-apiserver"]]


def build() -> tuple[Path, bool]:
    """Build unless the cache has it. Returns (binary, whether it built)."""
    final = build_dir()
    return final / NAME, cache.run(final, NAME, _fill, steps, ClusterError)


def main(argv: Sequence[str] | None = None) -> int:
    return cache.build_main("python -m fencecheck.clusters.services.kube_build", __doc__,
                            label(), build, (ClusterError,), argv)


if __name__ == "__main__":
    sys.exit(main())
