"""Builds of the shipped client programs, cached by source hash outside the repository.

`python -m fencecheck.workloads.clients.build [NAME ...]` builds the named clients (all by
default) into `$FENCECHECK_CLIENT_CACHE` (default /var/cache/fencecheck/clients)/<name>-<hash>/,
where <hash> covers the client's source folder and its build recipe: a rebuilt source gets a new
folder, an unchanged one is a no-op. A build goes to a temporary folder first and is renamed into
place only when it succeeded, so a half-built client is never found. `command(name)` is the argv
that runs a built client, or `NotBuilt` saying how to build it.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fencecheck.workloads.base import WorkloadError

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
DEFAULT_CACHE = Path("/var/cache/fencecheck/clients")
BUILD_HINT = "bash scripts/build-clients.sh"
# Debian's Curator and its dependencies, compiled against and run with (no Maven resolution).
JAVA_CLASSPATH = ":".join(f"/usr/share/java/{j}.jar" for j in (
    "curator-recipes", "curator-framework", "curator-client", "zookeeper", "zookeeper-jute",
    "guava", "slf4j-api", "slf4j-nop", "jackson-databind", "jackson-core",
    "jackson-annotations"))


# The JVM clients of issue 19: their pom.xml's dependencies copied from Maven Central into lib/
# (a pinned plugin, no build plugins), then javac against them.
MAVEN_COPY = ["mvn", "-B", "-q",
              "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies",
              "-DoutputDirectory=lib", "-DincludeScope=runtime"]


def _maven_javac(d: Path, main: str) -> list[list[str]]:
    return [MAVEN_COPY, ["javac", "-cp", str(d / "lib" / "*"), "-d", str(d / "classes"),
                         str(d / f"{main}.java")]]


def _java_run(d: Path) -> list[str]:
    return ["java", "-Xss512k", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-cp", f"{d / 'classes'}:{d / 'lib' / '*'}"]


class NotBuilt(WorkloadError):
    """A shipped client whose build is not in the cache."""


@dataclass(frozen=True, slots=True)
class ClientBuild:
    """One shipped client: its source folder, how to build it into a folder, how to run it."""

    name: str
    source: str  # folder under workloads/clients/
    steps: Callable[[Path], list[list[str]]]  # the build commands, run inside the build folder
    run: Callable[[Path], list[str]]  # argv of the built client
    recipe: str  # part of the hash: a changed recipe is a new build


BUILDS: dict[str, ClientBuild] = {
    "node-redlock": ClientBuild(
        "node-redlock", "node",
        lambda d: [["npm", "ci", "--omit=dev", "--no-audit", "--no-fund", "--loglevel=error"]],
        lambda d: ["node", str(d / "redlock-client.js")],
        "npm ci v1"),
    "curator": ClientBuild(
        "curator", "java",
        lambda d: [["javac", "-cp", JAVA_CLASSPATH, "-d", str(d / "classes"),
                    str(d / "CuratorClient.java")]],
        lambda d: ["java", "-Xss512k", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                   "-cp", f"{d / 'classes'}:{JAVA_CLASSPATH}", "CuratorClient"],
        "javac v1 " + JAVA_CLASSPATH),
    "etcd-go": ClientBuild(
        "etcd-go", "go",
        lambda d: [["go", "build", "-mod=readonly", "-trimpath", "-o", str(d / "etcd-client"),
                    "."]],
        lambda d: [str(d / "etcd-client")],
        "go build v1"),
    # issue 19: Go and JVM lock libraries (workloads/third_party.py)
    "go-redsync": ClientBuild(
        "go-redsync", "go/redsync",
        lambda d: [["go", "build", "-mod=readonly", "-trimpath", "-o",
                    str(d / "redsync-client"), "."]],
        lambda d: [str(d / "redsync-client")],
        "go build v1"),
    "etcd-go-election": ClientBuild(
        "etcd-go-election", "go/election",
        lambda d: [["go", "build", "-mod=readonly", "-trimpath", "-o",
                    str(d / "etcd-election"), "."]],
        lambda d: [str(d / "etcd-election")],
        "go build v1"),
    "client-go": ClientBuild(
        "client-go", "go/client-go",
        lambda d: [["go", "build", "-mod=readonly", "-trimpath", "-o",
                    str(d / "client-go-lease"), "."]],
        lambda d: [str(d / "client-go-lease")],
        "go build v1"),
    "redisson": ClientBuild(
        "redisson", "java/redisson", lambda d: _maven_javac(d, "RedissonLockClient"),
        lambda d: [*_java_run(d), "RedissonLockClient", "lock"], "mvn+javac v1"),
    "redisson-fenced": ClientBuild(
        "redisson-fenced", "java/redisson", lambda d: _maven_javac(d, "RedissonLockClient"),
        lambda d: [*_java_run(d), "RedissonLockClient", "fenced"], "mvn+javac v1"),
    "shedlock": ClientBuild(
        "shedlock", "java/shedlock", lambda d: _maven_javac(d, "ShedLockClient"),
        lambda d: [*_java_run(d), "ShedLockClient"], "mvn+javac v1"),
    "shedlock-jdbc": ClientBuild(
        "shedlock-jdbc", "java/shedlock-jdbc", lambda d: _maven_javac(d, "ShedLockJdbcClient"),
        lambda d: [*_java_run(d), "ShedLockJdbcClient"], "mvn+javac v1"),
}


def cache_root() -> Path:
    return Path(os.environ.get("FENCECHECK_CLIENT_CACHE", DEFAULT_CACHE))


def _nested(build: ClientBuild) -> set[str]:
    """Other clients' source folders inside this one's (go/redsync in go): not its source."""
    prefix = build.source + "/"
    return {b.source.removeprefix(prefix).split("/")[0] for b in BUILDS.values()
            if b.source.startswith(prefix)}


def source_hash(build: ClientBuild) -> str:
    """sha256 of the recipe and every source file (path and content), first 16 hex digits."""
    h = hashlib.sha256(build.recipe.encode())
    src = HERE / build.source
    skip = {"node_modules", "classes", *_nested(build)}
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        rel = path.relative_to(src)
        if rel.parts[0] in skip:
            continue
        h.update(str(rel).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def build_dir(name: str) -> Path:
    build = _get(name)
    return cache_root() / f"{name}-{source_hash(build)}"


def _get(name: str) -> ClientBuild:
    try:
        return BUILDS[name]
    except KeyError:
        raise WorkloadError(f"unknown shipped client {name!r}; known: "
                            f"{', '.join(BUILDS)}") from None


def command(name: str) -> list[str]:
    """The argv that runs the built client `name`; NotBuilt (with the fix) if it is not built."""
    d = build_dir(name)
    if not (d / ".built").exists():
        raise NotBuilt(f"client {name!r} is not built (looked in {d}); build it with: "
                       f"{BUILD_HINT} {name}")
    return _get(name).run(d)


def build(name: str) -> tuple[Path, bool]:
    """Build `name` unless its folder is already there. Returns (folder, whether it built)."""
    b = _get(name)
    final = build_dir(name)
    if (final / ".built").exists():
        return final, False
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=final.parent))
    try:
        shutil.copytree(HERE / b.source, tmp, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("node_modules", "classes", *_nested(b)))
        for argv in b.steps(tmp):
            log.info("%s: %s", name, " ".join(argv))
            res = subprocess.run(argv, cwd=tmp, stdin=subprocess.DEVNULL,
                                 capture_output=True, text=True)
            if res.returncode != 0:
                raise WorkloadError(f"building {name}: {' '.join(argv)} exited "
                                    f"{res.returncode}: {(res.stderr or res.stdout)[-2000:]}")
        # What a build makes does not depend on its folder's name (node_modules, class files,
        # a static binary), so it is built aside and renamed into place when complete.
        (tmp / ".built").write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ\n", time.gmtime()))
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final, True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fencecheck.workloads.clients.build",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help=f"clients to build (default all: "
                        f"{', '.join(BUILDS)})")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    for name in args.names or list(BUILDS):
        t = time.monotonic()
        try:
            folder, built = build(name)
        except WorkloadError as e:
            print(f"build-clients: {e}", file=sys.stderr)
            return 3
        what = "built" if built else "cached"
        print(f"build-clients: {name}: {what} in {time.monotonic() - t:.1f} s: {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
