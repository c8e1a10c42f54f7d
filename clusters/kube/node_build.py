"""The node's Kubernetes programs of the one-node cluster (fencecheck/clusters/kube/): `kubelet`,
`kube-scheduler`, `kube-controller-manager` and `kubectl`, built from the Kubernetes Go modules at
the release `node_go/go.mod` pins (the release of the backend's kube-apiserver, v1.37.2: no
version skew at all; docs/nightly.md says why), into one folder of the machine's build cache,
`kube-node-<version>-<hash of go.mod and go.sum>/` (fencecheck.toolchain.cache: built once per
machine, an unchanged pin is a no-op).

`fencecheck build kube-node` (or `python -m fencecheck.clusters.kube.node_build`) builds it:
four programs, minutes of compiling on a small machine. `binary(name)` is one of them, or
`NotBuilt` naming that command.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from fencecheck.clusters.base import ClusterError
from fencecheck.clusters.services.kube_build import KubeBuild, NotBuilt
from fencecheck.toolchain import cache

MODULE = Path(__file__).resolve().parent / "node_go"
TOOLCHAIN = "go"  # fencecheck.toolchain.tools
NAME = "kube-node"
COMMANDS = ("kubelet", "kube-scheduler", "kube-controller-manager", "kubectl")
# The sandbox ("pause") program of every pod, from the pinned release's own source
# (build/pause/linux/pause.c), static: the sandbox image is this one file (images.py), as
# registry.k8s.io/pause is, which this machine cannot pull.
PAUSE = ("sh", "-c", 'set -- $(go list -mod=readonly -m -f "{{.Dir}} {{.Version}}" '
                     'k8s.io/kubernetes) && gcc -Os -static -DVERSION="$2" -o pause '
                     '"$1/build/pause/linux/pause.c"')
BUILD = KubeBuild(NAME, MODULE, COMMANDS, extra=(PAUSE,))
BUILD_HINT = BUILD.hint()

__all__ = ["BUILD", "BUILD_HINT", "COMMANDS", "NAME", "NotBuilt", "binary", "build"]


def version() -> str:
    return BUILD.version()


def label() -> str:
    return BUILD.label()


def source() -> str:
    """What the build is made from, for `fencecheck build --dry-run`."""
    return BUILD.source()


def build_dir() -> Path:
    return BUILD.build_dir()


def binary(name: str) -> Path:
    """One of COMMANDS, built; NotBuilt (with the command that builds it) if it is not."""
    return BUILD.path(name)


def steps(folder: Path) -> list[list[str]]:
    return BUILD.steps(folder)


def build() -> tuple[Path, bool]:
    """Build unless the cache has it. Returns (the folder of the four programs, whether it
    built)."""
    return BUILD.build()


def main(argv: Sequence[str] | None = None) -> int:
    return cache.build_main("python -m fencecheck.clusters.kube.node_build", __doc__,
                            label(), build, (ClusterError,), argv)


if __name__ == "__main__":
    sys.exit(main())
