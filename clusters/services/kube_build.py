"""The `kube-apiserver` binary of the `kubernetes` backend: built from the Kubernetes Go modules at
the release pinned in `kube_apiserver_go/go.mod` (every staging module replaced by its matching
v0.x version), cached per machine.

`fencecheck build kube-apiserver` (or `python -m fencecheck.clusters.services.kube_build`) builds
it into `$FENCECHECK_CLIENT_CACHE` (default /var/cache/fencecheck/clients, beside the shipped
clients)/kube-apiserver-<version>-<hash>/, <hash> covering go.mod, go.sum and the build commands:
an unchanged pin is a no-op. The build goes to a temporary folder renamed into place when
complete, so a half-built binary is never found. `binary()` is the path of the built binary,
or `NotBuilt` naming the command that builds it (the backend's preflight turns that into exit 3
before a run starts).

`KubeBuild` is the recipe: a Go module pinning `k8s.io/kubernetes` and the commands of
`k8s.io/kubernetes/cmd/` it builds into one cache folder; the one-node cluster's kubelet,
scheduler, controller manager and kubectl are another (fencecheck/clusters/kube/node_build.py).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fencecheck.clusters.base import ClusterError
from fencecheck.toolchain import cache
from fencecheck.toolchain.tools import GO_STATIC

MODULE = Path(__file__).resolve().parent / "kube_apiserver_go"
BUILD_HINT = "fencecheck build kube-apiserver"
TOOLCHAIN = "go"  # fencecheck.toolchain.tools
NAME = "kube-apiserver"
# `fencecheck build` builds the servers after the clients, those with LAST after the others:
# kube-apiserver reuses what the client-go client compiled, and its build ends in a link of
# some 16 s on one core, which should be the only such end before the tests (row 64 of
# docs/measurements.md: nats-server after it left one core idle for about 40 s).
LAST = True
# The build tags of a Kubernetes release build (hack/lib/golang.sh: "selinux,notest" and, not
# debugging, "grpcnotrace") but `notest`: it leaves out two fuzzing helpers of
# k8s.io/apimachinery (intstr, meta/v1), which changes those packages and so every package above
# them, and the client-go client (the same release's client-go) would compile all 328 of them
# again (a new machine's run: client-go 263 s, then kube-apiserver 347 s). Without it, the
# client-go client shares every package but its own two with kube-apiserver (`go list -deps`).
RELEASE_TAGS = "selinux,grpcnotrace"


class NotBuilt(ClusterError):
    """A pinned Kubernetes build is not in the cache."""


@dataclass(frozen=True, slots=True)
class KubeBuild:
    """Commands of `k8s.io/kubernetes/cmd/` built from the Go module in `module` (its go.mod
    pins the release) into one cache folder, `<cache>/<name>-<version>-<hash of go.mod and
    go.sum>/<command>`."""

    name: str
    module: Path
    commands: tuple[str, ...]
    # more commands run in the build folder after the Go builds (argv lists)
    extra: tuple[tuple[str, ...], ...] = ()

    def version(self) -> str:
        """The pinned Kubernetes release (the `require k8s.io/kubernetes` line of go.mod)."""
        gomod = self.module / "go.mod"
        m = re.search(r"^require k8s\.io/kubernetes (v\S+)", gomod.read_text(), re.M)
        if m is None:
            raise ClusterError(f"{gomod}: no `require k8s.io/kubernetes vX.Y.Z` line")
        return m.group(1)

    def label(self) -> str:
        return f"{self.name} {self.version()}"

    def source(self) -> str:
        return f"k8s.io/kubernetes {self.version()} ({self.module / 'go.mod'})"

    def hint(self) -> str:
        return f"fencecheck build {self.name}"

    def build_dir(self) -> Path:
        h = hashlib.sha256()
        for f in ("go.mod", "go.sum"):
            h.update((self.module / f).read_bytes() + b"\0")
        for argv in self.steps(Path(".")):  # a changed command or flag is a new build
            h.update(" ".join(argv).encode() + b"\0")
        h.update(GO_STATIC.encode())
        return cache.cache_root() / f"{self.name}-{self.version()}-{h.hexdigest()[:12]}"

    def path(self, command: str) -> Path:
        """The built `command`; NotBuilt (with the command that builds it) if there is none."""
        d = self.build_dir()
        if not cache.is_built(d):
            raise NotBuilt(f"{self.name} {self.version()} is not built (looked in {d}); build "
                           f"it with: {self.hint()}")
        return d / command

    def fill(self, folder: Path) -> None:
        for f in ("go.mod", "go.sum"):
            shutil.copy(self.module / f, folder / f)

    def steps(self, folder: Path) -> list[list[str]]:
        # As the release's own build does (hack/lib/golang.sh, not DBG): the version stamp, so
        # that /version names the release; -s -w, leaving out the symbol table and DWARF (the
        # link of consul: 10.7 CPU s instead of 24.9; panics still print their stacks); its
        # build tags but one (RELEASE_TAGS); and static (CGO_ENABLED=0, toolchain.tools).
        stamp = f"-s -w -X k8s.io/component-base/version.gitVersion={self.version()}"
        return [["go", "build", "-mod=readonly", "-trimpath", f"-tags={RELEASE_TAGS}",
                 f"-ldflags={stamp}", "-o",
                 str(folder / c), f"k8s.io/kubernetes/cmd/{c}"] for c in self.commands
                ] + [list(argv) for argv in self.extra]

    def build(self) -> tuple[Path, bool]:
        """Build unless the cache has it. Returns (folder, whether it built)."""
        final = self.build_dir()
        return final, cache.run(final, self.name, self.fill, self.steps, ClusterError)


APISERVER = KubeBuild(NAME, MODULE, (NAME,))


def version() -> str:
    return APISERVER.version()


def label() -> str:
    """The name and pinned release, as `fencecheck build` and test.json show it."""
    return APISERVER.label()


def source() -> str:
    """What the build is made from, for `fencecheck build --dry-run`."""
    return APISERVER.source()


def build_dir() -> Path:
    return APISERVER.build_dir()


def binary() -> Path:
    """The built kube-apiserver; NotBuilt (with the command that builds it) if there is none."""
    return APISERVER.path(NAME)


def steps(folder: Path) -> list[list[str]]:
    return APISERVER.steps(folder)


def build() -> tuple[Path, bool]:
    """Build unless the cache has it. Returns (binary, whether it built)."""
    folder, built = APISERVER.build()
    return folder / NAME, built


def main(argv: Sequence[str] | None = None) -> int:
    return cache.build_main("python -m fencecheck.clusters.services.kube_build", __doc__,
                            label(), build, (ClusterError,), argv)


if __name__ == "__main__":
    sys.exit(main())
