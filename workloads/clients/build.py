"""Builds of the shipped client programs, cached by source hash outside the repository.

`python -m fencecheck.workloads.clients.build [NAME ...]` builds the named clients (all by
default) into `$FENCECHECK_CLIENT_CACHE` (default /var/cache/fencecheck/clients)/<name>-<hash>/,
where <hash> covers the client's source folder, the libraries it shares with other clients (the
stdio library of its language, go/stdio/ or java/stdio/, and java/shedlock-common/ for the two
ShedLock clients: each copied into its build folder under its own name) and its build recipe:
a changed source or library gets a new folder, an unchanged one is a no-op. A build goes to a
temporary folder first and is renamed into place only when it succeeded, so a half-built client
is never found (fencecheck.toolchain.cache, the runner kube-apiserver's build uses too).
`command(name)` is the argv that runs a built client, or `NotBuilt` saying how to build it.
A shipped client is declared once, by the `program` of its ClientDescriptor (descriptors/): its
build here, its class (third_party.ShippedClient) and its comparison row (`pinned`) follow.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import re
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache as memo
from pathlib import Path
from typing import Any

from fencecheck.descriptors import catalog
from fencecheck.descriptors.base import Program
from fencecheck.toolchain import cache
from fencecheck.toolchain.tools import GO_STATIC, JVM_BUILD_FLAGS
from fencecheck.workloads.base import WorkloadError
from fencecheck.workloads.clients import jvm

HERE = Path(__file__).resolve().parent
BUILD_HINT = "fencecheck build"
# Debian's Curator and its dependencies, compiled against and run with (no Maven resolution).
JAVA_CLASSPATH = ":".join(f"/usr/share/java/{j}.jar" for j in (
    "curator-recipes", "curator-framework", "curator-client", "zookeeper", "zookeeper-jute",
    "guava", "slf4j-api", "slf4j-nop", "jackson-databind", "jackson-core",
    "jackson-annotations"))


# The JVM clients of issue 19: their pom.xml's dependencies copied from Maven Central into lib/
# (a pinned plugin, no build plugins), then javac against them, with the shared stdio source.
MAVEN_COPY = ["mvn", "-B", "-q",
              "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies",
              "-DoutputDirectory=lib", "-DincludeScope=runtime"]
GO_STDIO, JAVA_STDIO, SHEDLOCK = "go/stdio", "java/stdio", "java/shedlock-common"


def _javac(d: Path, classpath: str, main: str, shared: tuple[str, ...],
           source: str = "") -> list[str]:
    # The shared sources, in their folders of the build folder, compiled with the client's: its
    # main class's file last, after any other file of its own folder.
    sources = [str(d / Path(s).name / f.name) for s in shared
               for f in sorted((HERE / s).glob("*.java"))]
    own = [str(d / f.name) for f in sorted((HERE / source).glob("*.java"))
           if source and f.name != f"{main}.java"]
    return ["javac", *(f"-J{f}" for f in JVM_BUILD_FLAGS), "-cp", classpath,
            "-d", str(d / "classes"), *sources, *own, str(d / f"{main}.java")]


def _maven_javac(d: Path, main: str, shared: tuple[str, ...], source: str) -> list[list[str]]:
    return [MAVEN_COPY, _javac(d, str(d / "lib" / "*"), main, shared, source), jvm.pack(d)]


def _go_build(d: Path, binary: str, moved: tuple[str, ...] = (),
              indirect: tuple[str, ...] = ()) -> list[list[str]]:
    # go.mod's replace names the library where it is in the source tree (../stdio beside a
    # nested client); in the build folder it is ./stdio. `moved`: module@version requirements
    # of a version build, set (and go.sum completed) before the build, after dropping the
    # pinned release's indirect requirements (`indirect`), which would hold the older release's
    # dependencies at versions it cannot build with.
    drop = [["go", "mod", "edit", *(f"-droprequire={m}" for m in indirect)]] if indirect else []
    at = [*drop, ["go", "get", *moved], ["go", "mod", "tidy"]] if moved else []
    return [["go", "mod", "edit", "-replace=fencecheck/stdio=./stdio"], *at,
            ["go", "build", "-mod=readonly", "-trimpath", "-o", str(d / binary), "."]]


def _indirect(source: str) -> tuple[str, ...]:
    """The indirect requirements of a go program's go.mod."""
    text = (HERE / source / "go.mod").read_text()
    return tuple(re.findall(r"^\s*(\S+)\s+v\S+\s+//\s*indirect\s*$", text, re.M))


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
    shared: tuple[str, ...] = ()  # folders under workloads/clients/ of the libraries it uses
    toolchain: str = "go"  # what builds it (and runs it): a key of fencecheck.toolchain.tools
    archive: bool = False  # a JVM program: a class-data-sharing archive follows its build (jvm)


def _go(name: str, source: str, binary: str) -> ClientBuild:
    return ClientBuild(name, source, lambda d: _go_build(d, binary), lambda d: [str(d / binary)],
                       f"go build v3 {GO_STATIC}", (GO_STDIO,), "go")


def _maven(name: str, source: str, main: str, *args: str,
           shared: tuple[str, ...] = (JAVA_STDIO,)) -> ClientBuild:
    return ClientBuild(name, source, lambda d: _maven_javac(d, main, shared, source),
                       lambda d: jvm.argv(d, jvm.classpath(d), main, args), "mvn+javac+jar v3",
                       shared, "maven", archive=True)


def _npm(name: str, source: str, script: str) -> ClientBuild:
    return ClientBuild(
        name, source,
        lambda d: [["npm", "ci", "--omit=dev", "--no-audit", "--no-fund", "--loglevel=error"]],
        lambda d: ["node", str(d / script)], "npm ci v1", toolchain="npm")


def _debian_javac(name: str, source: str, main: str) -> ClientBuild:
    return ClientBuild(
        name, source, lambda d: [_javac(d, JAVA_CLASSPATH, main, (JAVA_STDIO,)), jvm.pack(d)],
        lambda d: jvm.argv(d, jvm.classpath(d, JAVA_CLASSPATH), main),
        "javac+jar v3 " + JAVA_CLASSPATH, (JAVA_STDIO,), "javac", archive=True)


def client_build(name: str, program: Program) -> ClientBuild:
    """The build of a shipped client from its descriptor's `program`."""
    if program.build == "go":
        return _go(name, program.source, program.entry)
    if program.build == "maven":
        return _maven(name, program.source, program.entry, *program.args,
                      shared=(JAVA_STDIO, *program.shared))
    if program.build == "npm":
        return _npm(name, program.source, program.entry)
    if program.build == "javac":
        return _debian_javac(name, program.source, program.entry)
    raise WorkloadError(f"client {name!r}: unknown program build {program.build!r} "
                        "(go, maven, npm or javac)")


def programs() -> dict[str, Program]:
    """Every shipped client's program, by client name, from the descriptors (a client on two
    backends, like redisson, declares one program)."""
    out: dict[str, Program] = {}
    for backend in catalog.backends().values():
        for c in backend.clients:
            if c.program is not None:
                out.setdefault(c.name, c.program)
    return out


@memo
def _builds() -> dict[str, ClientBuild]:
    return {n: client_build(n, p) for n, p in programs().items()}


def version_build(name: str, version: str | None) -> str:
    """The build a client runs with the client option `version`: `name` itself for none (or
    the pinned one), else `name@version`, one of its program's `versions` (WorkloadError
    naming them otherwise)."""
    if version is None:
        return name
    program = programs().get(name)
    pin = pinned(name)
    if program is None or (pin is not None and pin.split()[-1] == version):
        return name
    if version not in program.versions:
        known = ", ".join(program.versions) or "none but the pinned one"
        raise WorkloadError(f"client {name}: option version={version!r}: no build of that "
                            f"version (known: {known})")
    return f"{name}@{version}"


@memo
def _variant(name: str, version: str) -> ClientBuild:
    """The build of `name` against another release of its pinned dependency."""
    program = programs()[name]
    if program.build != "go" or program.pins is None:
        raise WorkloadError(f"client {name}: only a go program builds other versions")
    moved = tuple(f"{m}@{version}" for m in (program.pins[0], *program.moves_with))
    indirect = _indirect(program.source)
    return ClientBuild(f"{name}@{version}", program.source,
                       lambda d: _go_build(d, program.entry, moved, indirect),
                       lambda d: [str(d / program.entry)],
                       f"go build v3 {GO_STATIC} " + " ".join(moved),
                       (GO_STDIO,), "go")


def __getattr__(name: str) -> Any:
    # BUILDS is derived from the descriptors when first asked for (importing this module must
    # not load plugins: a broken one is reported where the catalog is read).
    if name == "BUILDS":
        return _builds()
    raise AttributeError(name)


def pinned(name: str) -> str | None:
    """"label version" of the dependency a shipped client's descriptor pins (read from its
    go.mod, pom.xml or package.json), None if it names none or the manifest lacks it."""
    program = programs().get(name)
    if program is None or program.pins is None:
        return None
    dep, label = program.pins
    folder = HERE / program.source
    found: str | None = None
    if (folder / "go.mod").is_file():
        m = re.search(rf"^\s*(?:require\s+)?{re.escape(dep)}\s+(v\S+)",
                      (folder / "go.mod").read_text(), re.M)
        found = m.group(1) if m else None
    elif (folder / "pom.xml").is_file():
        m = re.search(rf"<artifactId>{re.escape(dep)}</artifactId>\s*<version>([^<]+)</version>",
                      (folder / "pom.xml").read_text())
        found = m.group(1).strip() if m else None
    elif (folder / "package.json").is_file():
        deps = json.loads((folder / "package.json").read_text()).get("dependencies", {})
        found = deps.get(dep)
    return f"{label} {found}" if found else None


def _nested(build: ClientBuild) -> set[str]:
    """Other clients' and the libraries' source folders inside this one's (go/redsync and
    go/stdio in go): not its source (a library is hashed and copied under its own name)."""
    prefix = build.source + "/"
    builds = _builds().values()
    inside = [b.source for b in builds] + [s for b in builds for s in b.shared]
    return {s.removeprefix(prefix).split("/")[0] for s in inside if s.startswith(prefix)}


def _files(build: ClientBuild) -> list[tuple[str, Path]]:
    """Every file of the build folder before its steps run: (path there, path in the tree)."""
    trees = [("", HERE / build.source, {"node_modules", "classes", *_nested(build)})]
    trees += [(Path(s).name + "/", HERE / s, set()) for s in build.shared]
    return [(prefix + str(p.relative_to(src)), p) for prefix, src, skip in trees
            for p in sorted(src.rglob("*"))
            if p.is_file() and p.relative_to(src).parts[0] not in skip]


def source_hash(build: ClientBuild) -> str:
    """sha256 of the recipe and every source file (path and content), first 16 hex digits."""
    h = hashlib.sha256(build.recipe.encode())
    for rel, path in sorted(_files(build)):
        h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _folder_name(name: str) -> str:
    """The name a build folder goes by: that of the first client whose program is built the
    same way (source, toolchain, entry and libraries; its command-line arguments are not part of
    the build). Clients that differ only in their arguments (redisson and redisson-fenced; the
    four Spring Integration modes) share one build and one class-data archive instead of
    compiling the same source into folders of their own (about 55 s of a new machine's setup)."""
    program = programs().get(name)
    if program is None:
        return name  # a version build (NAME@VERSION): its own
    key = (program.build, program.source, program.entry, program.shared)
    for other, p in programs().items():
        if (p.build, p.source, p.entry, p.shared) == key:
            return other
    return name


def build_dir(name: str) -> Path:
    build = _get(name)
    return cache.cache_root() / f"{_folder_name(name)}-{source_hash(build)}"


def _get(name: str) -> ClientBuild:
    builds = _builds()
    if "@" in name:  # a version build: NAME@VERSION
        base, version = name.split("@", 1)
        if version_build(base, version) == name:
            return _variant(base, version)
    try:
        return builds[name]
    except KeyError:
        raise WorkloadError(f"unknown shipped client {name!r}; known: "
                            f"{', '.join(builds)}") from None


def command(name: str) -> list[str]:
    """The argv that runs the built client `name`; NotBuilt (with the fix) if it is not built."""
    d = build_dir(name)
    if not cache.is_built(d):
        raise NotBuilt(f"client {name!r} is not built (looked in {d}); build it with: "
                       f"{BUILD_HINT} {name}")
    return _get(name).run(d)


def _fill(build: ClientBuild, folder: Path) -> None:
    for rel, path in _files(build):
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, folder / rel)


def build(name: str) -> tuple[Path, bool]:
    """Build `name` unless its folder is already there, and a JVM program's class-data archive
    unless its folder is (workloads/clients/jvm.py). Returns (folder, whether it built)."""
    b = _get(name)
    final = build_dir(name)
    built = cache.run(final, name, lambda d: _fill(b, d), b.steps, WorkloadError)
    if b.archive:
        cds = jvm.cds_dir(final)
        if built and cds.exists():
            shutil.rmtree(cds)  # dumped against the jars just replaced

        def train(d: Path) -> None:
            jvm.train(b.run(final), d, f"{_folder_name(name)}-cds")

        built |= cache.run(cds, f"{_folder_name(name)}-cds", train, lambda d: [], WorkloadError)
    return final, built


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fencecheck.workloads.clients.build",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    builds = _builds()
    parser.add_argument("names", nargs="*", help=f"clients to build (default all: "
                        f"{', '.join(builds)})")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    for name in args.names or list(builds):
        t = time.monotonic()
        try:
            folder, built = build(name)
        except WorkloadError as e:
            print(f"fencecheck build: {e}", file=sys.stderr)
            return 3
        print(cache.summary(name, built, t, folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
