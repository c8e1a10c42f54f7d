"""`fencecheck doctor` on a machine set up by scripts/setup.sh: everything required is there,
and each item, Docker and SSH included, is reported with what was found; the build toolchains,
every program `fencecheck build` makes and the extras' Python packages too, each missing one with
what it disables and the command that fixes it, none assuming a checkout."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fencecheck.cli import doctor
from fencecheck.cli.build import recipes
from fencecheck.cli.doctor import Finding, _binary
from fencecheck.toolchain import tools
from tests.conftest import run_fencecheck


def test_doctor_passes_on_a_set_up_machine_and_names_each_prerequisite() -> None:
    # a root shell's PATH without /usr/sbin: dockerd is found there all the same
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    r = run_fencecheck("doctor", timeout=120, env=env)
    assert r.returncode == 0, r.stdout
    for item in ("iproute2", "iptables", "redis", "etcd", "zookeeper", "postgresql", "sshd",
                 "docker", "Go", "Maven", "Node.js", "JDK", "Python package kazoo",
                 *(f"build {name}" for name in recipes())):
        assert item in r.stdout, item
    if Path("/usr/sbin/dockerd").exists():
        assert "dockerd not installed" not in r.stdout
    assert "scripts/" not in r.stdout and ".venv" not in r.stdout


def test_a_missing_binary_comes_with_the_command_that_fixes_it() -> None:
    f = _binary("frobnicator", "no-such-binary-fc", "frob-pkg")
    assert f == Finding("frobnicator", False, "no-such-binary-fc not found",
                        "apt-get update && apt-get install -y frob-pkg")


def test_a_missing_toolchain_says_which_builds_it_disables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tools, "found", lambda t: None if t.binary == "go" else "/x")
    [go] = [f for f in doctor.toolchains() if f.what == "Go"]
    assert not go.ok and go.optional and go.fix == "apt-get update && apt-get install -y golang-go"
    assert "disables building" in go.detail
    for name in ("client-go", "etcd-go", "go-redsync", "kube-apiserver", "nats-server"):
        assert name in go.detail, name
    assert all(f.ok for f in doctor.toolchains() if f.what != "Go")


def test_an_unbuilt_program_says_what_cannot_run_and_how_to_build_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FENCECHECK_CLIENT_CACHE", str(tmp_path))
    found = {f.what: f for f in doctor.builds()}
    assert set(found) == {f"build {n}" for n in recipes()}
    kube = found["build kube-apiserver"]
    assert not kube.ok and kube.fix == "fencecheck build kube-apiserver"
    assert kube.detail == "not built: backend kubernetes cannot run"
    assert found["build redisson"].detail == \
        "not built: client redisson on redis, redis-sentinel cannot run"


def test_a_missing_python_package_names_its_extra_and_clients(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from fencecheck.descriptors import extras

    monkeypatch.setattr(extras, "is_installed", lambda dist: dist != "kazoo")
    [kazoo] = [f for f in doctor.python_packages() if f.what == "Python package kazoo"]
    assert not kazoo.ok and kazoo.fix == "pip install 'fencecheck[zookeeper]'"
    assert kazoo.detail == "not installed: disables client zookeeper, zookeeper-election"


def test_build_late_splits_the_builds_the_test_command_runs_beside_its_tests() -> None:
    late = {name for name, r in recipes().items() if r.late}
    assert late == {"consul"}  # about 10 CPU minutes from empty Go caches
    without = run_fencecheck("build", "--late", "without", "--dry-run", timeout=120)
    only = run_fencecheck("build", "--late", "only", "--dry-run", timeout=120)
    named = [{line.split(" ", 1)[0] for line in r.stdout.splitlines()
              if line and not line.startswith(" ")} for r in (without, only)]
    assert named[1] == late and not named[0] & late and named[0] | late == set(recipes())
    bad = run_fencecheck("build", "--late", "sometimes", timeout=120)
    assert bad.returncode == 3 and "--late sometimes: expected with, without or only" in bad.stderr
