"""The build toolchains: what each build needs, found on PATH or where a root shell's PATH lacks
it (the Go tarball's /usr/local/go/bin, /usr/sbin), and the Debian package of what is missing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fencecheck.toolchain import tools


def _exe(folder: Path, name: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("#!/bin/sh\n")
    os.chmod(folder / name, 0o755)


def test_a_program_outside_path_is_found_in_the_extra_places(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _exe(tmp_path / "go" / "bin", "go")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(tools, "EXTRA_PATH", (str(tmp_path / "go" / "bin"),))
    assert tools.which("go") == str(tmp_path / "go" / "bin" / "go")
    assert tools.missing("go") == []
    assert [t.binary for t in tools.missing("npm")] == ["node", "npm"]
    assert str(tmp_path / "go" / "bin") in tools.build_env()["PATH"].split(os.pathsep)


def test_missing_tools_name_their_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(tools, "EXTRA_PATH", ())
    monkeypatch.setattr(tools, "TOOLCHAINS", {
        **tools.TOOLCHAINS,
        "javac": (*tools.TOOLCHAINS["javac"][:1],
                  tools.Tool("a jar", None, "libx-java", path=str(tmp_path / "x.jar"))),
    })
    assert tools.apt_packages(["javac"], only_missing=True) == ["default-jdk-headless",
                                                                "libx-java"]
    (tmp_path / "x.jar").write_text("")
    assert tools.apt_packages(["javac"], only_missing=True) == ["default-jdk-headless"]
    assert "golang-go" in tools.apt_packages()


def test_every_build_kind_of_the_descriptors_has_a_toolchain() -> None:
    from fencecheck.workloads.clients.build import BUILDS

    assert {b.toolchain for b in BUILDS.values()} <= set(tools.TOOLCHAINS)


def test_go_builds_are_static_and_take_the_compile_settings_unless_set(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("GOGC", "GOMEMLIMIT", "GOFLAGS", "CGO_ENABLED"):
        monkeypatch.delenv(var, raising=False)
    env = tools.build_env()
    assert (env["GOGC"], env["GOMEMLIMIT"], env["GOFLAGS"], env["CGO_ENABLED"]) == (
        "off", "3GiB", "-gcflags=all=-c=1", "0")
    monkeypatch.setenv("GOGC", "100")
    monkeypatch.setenv("GOFLAGS", "-mod=mod")
    monkeypatch.setenv("CGO_ENABLED", "1")  # the builds' cache hashes say static: always static
    env = tools.build_env()
    assert (env["GOGC"], env["GOFLAGS"], env["CGO_ENABLED"]) == ("100", "-mod=mod", "0")
    assert "GOMEMLIMIT" not in env  # a GOGC of one's own is not bounded by ours
    monkeypatch.delenv("GOGC")
    monkeypatch.setenv("GOMEMLIMIT", "1GiB")  # nor is a memory limit of one's own turned off
    env = tools.build_env()
    assert "GOGC" not in env and env["GOMEMLIMIT"] == "1GiB"
