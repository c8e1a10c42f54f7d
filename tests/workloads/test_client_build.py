"""The shipped clients' builds without building them: each client's hash counts the libraries it
shares (its language's stdio library; ShedLock's mapping for the two ShedLock clients; the table
scripts runner of the Quartz and Spring Integration clients), so a change to one rebuilds exactly
its clients; the build folder holds each under its own name, and compiles every file of a client's
folder; and the runner both builders share (fencecheck.toolchain.cache) renames a build into place
only when every step succeeded."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fencecheck.toolchain import cache
from fencecheck.workloads.base import WorkloadError
from fencecheck.workloads.clients import build as build_module
from fencecheck.workloads.clients import jvm

GO = {"etcd-go", "go-redsync", "etcd-go-election", "client-go", "consul-go", "nats-go"}
SPRING = {"spring-jdbc", "spring-jdbc-leader", "spring-redis", "spring-redis-leader"}
JAVA = {"curator", "redisson", "redisson-fenced", "shedlock", "shedlock-jdbc", "hazelcast-java",
        "quartz", *SPRING}


def hashes() -> dict[str, str]:
    return {n: build_module.source_hash(b) for n, b in build_module.BUILDS.items()}


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    src = tmp_path / "clients"
    shutil.copytree(build_module.HERE, src,
                    ignore=shutil.ignore_patterns("node_modules", "classes", "__pycache__"))
    monkeypatch.setattr(build_module, "HERE", src)
    return src


@pytest.mark.parametrize(("library", "clients"), [
    ("go/stdio/stdio.go", GO), ("java/stdio/Stdio.java", JAVA),
    ("java/shedlock-common/ShedLockJobs.java", {"shedlock", "shedlock-jdbc"}),
    ("java/pg-schema/PgSchema.java", {"quartz", *SPRING}),
    ("java/spring-integration/SpringLeader.java", SPRING)])
def test_a_change_to_a_shared_library_changes_the_hash_of_its_clients_only(
        tree: Path, library: str, clients: set[str]) -> None:
    assert GO | JAVA | {"node-redlock"} == set(build_module.BUILDS)
    before = hashes()
    with (tree / library).open("a") as f:
        f.write("\n// changed\n")
    after = hashes()
    assert {n for n in before if before[n] != after[n]} == clients


def test_a_build_folder_holds_the_client_and_its_libraries_under_their_names(tree: Path) -> None:
    files = dict(build_module._files(build_module.BUILDS["go-redsync"]))
    assert {"main.go", "go.mod", "stdio/stdio.go", "stdio/go.mod"} <= set(files)
    assert files["stdio/stdio.go"] == tree / "go" / "stdio" / "stdio.go"
    # etcd-go's folder go/ contains the library and the other Go clients: neither is its source.
    outer = {rel.split("/")[0] for rel in dict(build_module._files(build_module.BUILDS["etcd-go"]))}
    assert outer == {"main.go", "go.mod", "go.sum", "stdio"}
    curator = set(dict(build_module._files(build_module.BUILDS["curator"])))
    assert curator == {"CuratorClient.java", "stdio/Stdio.java"}
    jdbc = set(dict(build_module._files(build_module.BUILDS["shedlock-jdbc"])))
    assert jdbc == {"ShedLockJdbcClient.java", "pom.xml", "stdio/Stdio.java",
                    "shedlock-common/ShedLockJobs.java"}
    javac = next(argv for argv in build_module.BUILDS["shedlock-jdbc"].steps(tree / "build")
                 if argv[0] == "javac")
    assert javac[-3:] == [str(tree / "build" / f) for f in (
        "stdio/Stdio.java", "shedlock-common/ShedLockJobs.java", "ShedLockJdbcClient.java")]
    # a client of more than one file: every file of its folder, its main class last
    javac = next(argv for argv in build_module.BUILDS["spring-jdbc-leader"].steps(tree / "build")
                 if argv[0] == "javac")
    assert javac[-4:] == [str(tree / "build" / f) for f in (
        "stdio/Stdio.java", "pg-schema/PgSchema.java", "SpringLeader.java",
        "SpringLockClient.java")]


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _fill(folder: Path) -> None:
    (folder / "src").write_text("x")


def test_the_runner_renames_a_complete_build_into_place_and_a_second_run_is_a_no_op(
        tmp_path: Path) -> None:
    final = tmp_path / "cache" / "prog-1"
    made = cache.run(final, "prog", _fill,
                     lambda d: [_py("open('out', 'w').write(open('src').read() * 2)")],
                     WorkloadError)
    assert made and cache.is_built(final) and (final / "out").read_text() == "xx"
    assert not cache.run(final, "prog", lambda d: None, lambda d: [_py("raise SystemExit(1)")],
                         WorkloadError)
    assert [p.name for p in final.parent.iterdir()] == ["prog-1"]


def test_a_failed_step_leaves_nothing_and_raises_the_callers_error(tmp_path: Path) -> None:
    final = tmp_path / "cache" / "prog-1"
    with pytest.raises(WorkloadError, match=r"building prog: .* exited 4: no compiler"):
        cache.run(final, "prog", lambda d: None,
                  lambda d: [_py("open('half', 'w')"),
                             _py("import sys; sys.stderr.write('no compiler'); sys.exit(4)")],
                  WorkloadError)
    assert not final.exists() and list(final.parent.iterdir()) == []


# Every program the Java recipes build (Maven or javac): each gets an archive, whoever adds it.
JVM = sorted(n for n, b in build_module.BUILDS.items() if b.toolchain in ("maven", "javac"))


@pytest.mark.parametrize("name", JVM)
def test_a_jvm_client_is_packed_into_one_jar_and_runs_with_its_archive_where_there_is_one(
        tmp_path: Path, name: str) -> None:
    b = build_module.BUILDS[name]
    folder = tmp_path / f"{name}-0123"
    (folder / "lib").mkdir(parents=True)
    for jar in ("b.jar", "a.jar"):
        (folder / "lib" / jar).touch()
    assert b.archive and b.steps(folder)[-1] == jvm.pack(folder)
    argv = b.run(folder)
    assert not any(a.startswith("-XX:SharedArchiveFile") for a in argv)
    # the JVM's own warnings never reach stdout, the protocol's channel
    assert argv[:len(jvm.JVM_FLAGS) + 1] == ["java", *jvm.JVM_FLAGS]
    cp = argv[argv.index("-cp") + 1].split(":")
    assert cp[0] == str(folder / "app.jar") and "*" not in "".join(cp)
    if b.toolchain == "maven":  # lib's jars in name order, as the archive was dumped with them
        assert cp[1:] == [str(folder / "lib" / "a.jar"), str(folder / "lib" / "b.jar")]
    archive = jvm.cds_dir(folder) / jvm.ARCHIVE
    archive.parent.mkdir()
    archive.touch()
    assert f"-XX:SharedArchiveFile={archive}" in b.run(folder)


def _built(name: str) -> list[str]:
    try:
        return build_module.command(name)
    except build_module.NotBuilt as e:
        pytest.skip(str(e))


def _archive(argv: list[str]) -> Path:
    arg = next((a for a in argv if a.startswith("-XX:SharedArchiveFile=")), None)
    assert arg, f"no class-data archive: {argv}"
    return Path(arg.partition("=")[2])


@pytest.mark.parametrize("name", JVM)
def test_a_built_jvm_client_maps_its_class_data_archive(name: str) -> None:
    """The archive the build trained is one a JVM with the run's class path takes (-Xshare:on
    refuses to start otherwise: a class path that differs, another JDK, a damaged file)."""
    argv = _built(name)
    archive = _archive(argv)
    assert jvm.usable(argv, archive), jvm.cds_dir(build_module.build_dir(name)) / jvm.TRAINING_LOG


def _start(argv: list[str], archive: str) -> subprocess.CompletedProcess[str]:
    argv = [f"-XX:SharedArchiveFile={archive}" if a.startswith("-XX:SharedArchiveFile=") else a
            for a in argv]
    env = {"PATH": "/usr/bin:/bin", "FENCECHECK_ENDPOINTS": "127.0.0.1:1",
           "FENCECHECK_OPTIONS": "{}"}
    return subprocess.run(argv, input='{"id": 0, "op": "close"}\n', capture_output=True,
                          text=True, timeout=120, env=env)


def test_a_stale_or_missing_archive_never_breaks_a_client_start(tmp_path: Path) -> None:
    """An archive the JVM cannot take (dumped for another class path, as after a JDK upgrade)
    or one gone since the argv was made: the client starts without it, stdout untouched; one
    damaged (a dump cut short) fails the check the build keeps an archive by."""
    curator, redisson = _built("curator"), _built("redisson")
    for argv, other in ((curator, _archive(redisson)), (redisson, _archive(curator))):
        for archive in (str(other), str(tmp_path / "gone.jsa")):
            res = _start(argv, archive)
            assert (res.returncode, res.stdout) == (0, ""), (archive, res.stdout, res.stderr)
    damaged = tmp_path / "damaged.jsa"
    damaged.write_bytes(_archive(curator).read_bytes()[:1 << 20])
    assert not jvm.usable(curator, damaged)
    assert not jvm.usable(curator, _archive(redisson))
