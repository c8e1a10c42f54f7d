"""The toolchains the builds run (Go, Maven, npm, javac against Debian's jars), where their
programs are found, and the Debian packages that provide them.

A build names its toolchain by key ("go", "maven", "npm", "javac": a client `Program`'s `build`,
or a pinned server build's `TOOLCHAIN`); `missing(key)` is what this machine lacks of it, each
with its package, which is what `fencecheck build` refuses with, `fencecheck doctor` reports and
`scripts/build-clients.sh` installs (`python3 -m fencecheck.toolchain.tools missing`: the
packages of what is missing; `apt`: of everything).

Programs are looked up on PATH, then where the Go release tarball and Debian's system programs
live (/usr/local/go/bin, /usr/sbin, /sbin): a root shell's PATH often lacks them.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Tool:
    """A program a build runs (`binary`), or a file it reads (`path`), and its Debian
    package(s), space-separated."""

    what: str
    binary: str | None
    package: str
    path: str | None = None


_JDK = Tool("JDK (javac, java)", "javac", "default-jdk-headless")
TOOLCHAINS: dict[str, tuple[Tool, ...]] = {
    "go": (Tool("Go", "go", "golang-go"),),
    "maven": (Tool("Maven", "mvn", "maven"), _JDK),
    "npm": (Tool("Node.js", "node", "nodejs"), Tool("npm", "npm", "npm")),
    # Curator and what it runs with, from Debian: javac against their jars (no Maven)
    "javac": (_JDK, *(Tool(f"{jar}.jar (Debian)", None, package, path=f"/usr/share/java/{jar}.jar")
                      for jar, package in (("curator-recipes", "libcurator-recipes-java"),
                                           ("jackson-databind", "libjackson2-databind-java"),
                                           ("slf4j-api", "libslf4j-java"),
                                           ("guava", "libguava-java")))),
}
EXTRA_PATH = ("/usr/local/go/bin", "/usr/sbin", "/sbin")


def search_path() -> str:
    """PATH, then the places a root shell's PATH often lacks."""
    parts = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys([*parts, *EXTRA_PATH]))


def which(binary: str) -> str | None:
    return shutil.which(binary, path=search_path())


# The Go compiler's garbage collector: off, under a memory limit (it collects only as a compile's
# heap nears GO_MEMLIMIT). The client-go client from an empty build cache, two rounds
# alternated: 219.4 and 237.8 CPU s at GOGC=400, 182.8 and 203.2 off (15 to 17% less; peak 1.1
# GB a compile against 0.9). GOGC=400 had already taken the etcd-go client from 95.5 CPU s
# (GOGC=100) to 72.6. A fresh machine's test command is CPU-bound, and Go compiling (consul,
# kube-apiserver, client-go) is a third of its CPU.
GO_GC = "off"
GO_MEMLIMIT = "3GiB"
# Go programs are built static, without cgo, as the release binaries of Consul, kube-apiserver
# and nats-server are (their release builds set CGO_ENABLED=0): no C compiler runs for the
# standard library's cgo packages. Part of the cache hash of the builds, so a machine's older
# cgo builds are rebuilt.
GO_STATIC = "CGO_ENABLED=0"
# The compiler's backend on one thread per package (-c=1; Go's default here is -c=2): go build
# already compiles two packages at once on two cores, and the concurrent backend costs CPU of
# its own. The etcd-go client from an empty build cache, three rounds of the three settings
# (user + sys CPU s; this machine's CPU time varies 10% from run to run): cgo 72.1, 72.5, 63.4;
# static 67.3, 69.9, 62.8; static with -c=1 50.7, 65.7, 53.3. Consul, static, from an empty
# build cache: 375.5 CPU s and 200 s on two idle cores with -c=1, 454.3 and 239 s without. It
# changes no output.
GO_FLAGS = "-gcflags=all=-c=1"


# The JVMs of a build (Maven copying a client's dependencies, javac) are short-lived: with only
# the first JIT tier and the serial collector they spend less CPU on compiling themselves.
# shedlock and quartz from an empty build folder (Maven's repository warm), two rounds: 17.8 and
# 18.9 CPU s as they were, 12.2 and 12.4 with MAVEN_OPTS so; with curator too and these flags
# for javac as well, 14.3 and 16.1 CPU s without them on javac, 12.3 and 14.3 with. What they
# build is the same (class files, a jar); the programs run with their own flags (clients/jvm.py).
JVM_BUILD_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


def build_env() -> dict[str, str]:
    """The environment a build step runs in: this one, with the extra places on PATH, the Go
    compiler's collector off under a memory limit (GO_GC, GO_MEMLIMIT) unless GOGC or
    GOMEMLIMIT is set, its backend on one thread (GO_FLAGS) unless GOFLAGS is set, and Go builds
    static (GO_STATIC); Maven's JVM takes JVM_BUILD_FLAGS unless MAVEN_OPTS is set."""
    key, value = GO_STATIC.split("=")
    gc = ({} if "GOGC" in os.environ or "GOMEMLIMIT" in os.environ
          else {"GOGC": GO_GC, "GOMEMLIMIT": GO_MEMLIMIT})
    return {**gc, "GOFLAGS": GO_FLAGS, "MAVEN_OPTS": " ".join(JVM_BUILD_FLAGS), **os.environ,
            key: value, "PATH": search_path()}


def found(tool: Tool) -> str | None:
    """Where `tool` is on this machine, None if it is not."""
    if tool.binary is not None:
        return which(tool.binary)
    return tool.path if tool.path is not None and os.path.exists(tool.path) else None


def missing(toolchain: str) -> list[Tool]:
    """The tools of `toolchain` this machine lacks."""
    return [t for t in TOOLCHAINS[toolchain] if found(t) is None]


def apt_packages(toolchains: list[str] | None = None, *, only_missing: bool = False
                 ) -> list[str]:
    """The Debian packages of the named toolchains (all by default; only of the tools this
    machine lacks with `only_missing`), each once."""
    keys = toolchains or list(TOOLCHAINS)
    chosen = [t for k in keys for t in TOOLCHAINS[k] if not only_missing or found(t) is None]
    return list(dict.fromkeys(p for t in chosen for p in t.package.split()))


def main(argv: list[str]) -> int:
    """`apt [TOOLCHAIN ...]`: their packages; `missing`: the packages of what is missing."""
    if not argv or argv[0] not in ("apt", "missing") or \
            any(k not in TOOLCHAINS for k in argv[1:]) or (argv[0] == "missing" and argv[1:]):
        print(f"usage: python3 -m fencecheck.toolchain.tools apt [{'|'.join(TOOLCHAINS)} ...]"
              " | missing", file=sys.stderr)
        return 3
    print("\n".join(apt_packages(argv[1:], only_missing=argv[0] == "missing")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
