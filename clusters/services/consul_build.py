"""The `consul` binary of the `consul` backend (its servers, and the `consul lock` command of the
`consul-lock` client): built from the Go module proxy at the release pinned in `consul_go/go.mod`,
cached per machine.

The pin is v1.16.1, released before HashiCorp moved Consul to the Business Source License in
August 2023: that release's LICENSE is the Mozilla Public License 2.0 (`license()` reads it from
the downloaded module, and the build refuses any other). Consul's own go.mod replaces its
submodules (api, sdk, proto-public, envoyextensions, troubleshoot) by local folders, which `go
install module@version` refuses, so the build is a module of ours that requires Consul at the pin
and builds its main package (`go build github.com/hashicorp/consul`); Go then takes the
submodules at the versions Consul's go.mod requires, which are the ones its release tagged.

The build is static (CGO_ENABLED=0, fencecheck.toolchain.tools), as HashiCorp's release binaries
are (.github/workflows/build.yml of the release).

`fencecheck build consul` (or `python -m fencecheck.clusters.services.consul_build`) builds it
into `$FENCECHECK_CLIENT_CACHE` (default /var/cache/fencecheck/clients)/
consul-<version>-<hash>/, <hash> covering go.mod, go.sum and the build command: an unchanged pin
is a no-op.
`binary()` is the path of the built binary, or `NotBuilt` naming the command that builds it (the
backend's preflight turns that into exit 3 before a run starts).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from fencecheck.clusters.base import ClusterError
from fencecheck.toolchain import cache
from fencecheck.toolchain.tools import GO_STATIC

MODULE = Path(__file__).resolve().parent / "consul_go"
CONSUL = "github.com/hashicorp/consul"
BUILD_HINT = "fencecheck build consul"
TOOLCHAIN = "go"  # fencecheck.toolchain.tools
NAME = "consul"
# About 10 CPU minutes from empty Go caches (docs/findings/consul.md): the test command builds it
# beside the tests (`fencecheck build --late only`), and the consul tests wait for it.
LATE = True
# The first lines of the license text the pinned release must carry.
MPL = "Mozilla Public License, version 2.0"


class NotBuilt(ClusterError):
    """consul is not in the cache."""


def version() -> str:
    """The pinned Consul release (the `require github.com/hashicorp/consul` line of go.mod)."""
    m = re.search(r"^require github\.com/hashicorp/consul (v\S+)", (MODULE / "go.mod").read_text(),
                  re.M)
    if m is None:
        raise ClusterError(f"{MODULE / 'go.mod'}: no `require {CONSUL} vX.Y.Z` line")
    return m.group(1)


def label() -> str:
    """The name and pinned release, as `fencecheck build` and test.json show it."""
    return f"{NAME} {version()}"


def source() -> str:
    """What the build is made from, for `fencecheck build --dry-run`."""
    return f"{CONSUL} {version()} ({MODULE / 'go.mod'})"


def build_dir() -> Path:
    h = hashlib.sha256()
    for f in ("go.mod", "go.sum"):
        h.update((MODULE / f).read_bytes() + b"\0")
    h.update(" ".join(steps(Path("."))[0]).encode() + b"\0" + GO_STATIC.encode())
    return cache.cache_root() / f"{NAME}-{version()}-{h.hexdigest()[:12]}"


def binary() -> Path:
    """The built consul; NotBuilt (with the command that builds it) if there is none."""
    d = build_dir()
    if not cache.is_built(d):
        raise NotBuilt(f"consul {version()} is not built (looked in {d}); build it with: "
                       f"{BUILD_HINT}")
    return d / NAME


def license_text(cwd: Path | None = None) -> str:
    """The LICENSE file of the pinned Consul module, downloaded (checked against the checksum
    database) into the Go module cache; `cwd` a folder outside any Go module."""
    res = subprocess.run(["go", "mod", "download", "-json", f"{CONSUL}@{version()}"],
                         capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd=cwd)
    if res.returncode != 0:
        raise ClusterError(f"go mod download {CONSUL}@{version()}: {res.stderr.strip()[-500:]}")
    return (Path(json.loads(res.stdout)["Dir"]) / "LICENSE").read_text()


def _fill(folder: Path) -> None:
    text = license_text(folder)
    if MPL not in text[:400]:
        raise ClusterError(f"{CONSUL}@{version()}: its LICENSE is not the {MPL}: "
                           f"{text[:120]!r}")
    for f in ("go.mod", "go.sum"):
        shutil.copy(MODULE / f, folder / f)
    (folder / "LICENSE.consul").write_text(text)


def steps(folder: Path) -> list[list[str]]:
    # The version stamp Consul's own build sets, so that `consul version` names the release;
    # -s -w leave out the symbol table and DWARF (measured: the link 10.7 CPU s instead of 24.9,
    # the binary 117 MB instead of 164; panics still print their stacks).
    stamp = (f"-s -w -X {CONSUL}/version.GitCommit=fencecheck-{version()} "
             f"-X {CONSUL}/version.Version={version().lstrip('v')} "
             f"-X {CONSUL}/version.VersionPrerelease=")
    return [["go", "build", "-mod=readonly", "-trimpath", f"-ldflags={stamp}", "-o",
             str(folder / NAME), CONSUL]]


def build() -> tuple[Path, bool]:
    """Build unless the cache has it. Returns (binary, whether it built)."""
    final = build_dir()
    return final / NAME, cache.run(final, NAME, _fill, steps, ClusterError)


def main(argv: Sequence[str] | None = None) -> int:
    return cache.build_main("python -m fencecheck.clusters.services.consul_build", __doc__,
                            label(), build, (ClusterError,), argv)


if __name__ == "__main__":
    sys.exit(main())
