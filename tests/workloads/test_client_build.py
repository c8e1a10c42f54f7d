"""The shipped clients' builds without building them: each client's hash counts the libraries it
shares (its language's stdio library; ShedLock's mapping for the two ShedLock clients), so a
change to one rebuilds exactly its clients; the build folder holds each under its own name; and
the runner both builders share (fencecheck.toolchain.cache) renames a build into place only when
every step succeeded."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from fencecheck.toolchain import cache
from fencecheck.workloads.base import WorkloadError
from fencecheck.workloads.clients import build as build_module

GO = {"etcd-go", "go-redsync", "etcd-go-election", "client-go", "consul-go", "nats-go"}
JAVA = {"curator", "redisson", "redisson-fenced", "shedlock", "shedlock-jdbc", "hazelcast-java"}


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
    ("java/shedlock-common/ShedLockJobs.java", {"shedlock", "shedlock-jdbc"})])
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
    javac = build_module.BUILDS["shedlock-jdbc"].steps(tree / "build")[-1]
    assert javac[-3:] == [str(tree / "build" / f) for f in (
        "stdio/Stdio.java", "shedlock-common/ShedLockJobs.java", "ShedLockJdbcClient.java")]


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
