"""Which shipped clients share a build: those whose programs are built the same way (source,
toolchain, entry, libraries) and differ only in their command-line arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

from fencecheck.workloads.clients import build


def test_clients_differing_only_in_arguments_share_one_build_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FENCECHECK_CLIENT_CACHE", str(tmp_path))
    folders = {n: build.build_dir(n) for n in build.BUILDS}
    assert folders["redisson-fenced"] == folders["redisson"]
    spring = {folders[n] for n in ("spring-redis", "spring-redis-leader", "spring-jdbc",
                                   "spring-jdbc-leader")}
    assert len(spring) == 1
    # ... while their commands keep their own arguments
    assert build.BUILDS["redisson"].run(tmp_path)[-1] == "lock"
    assert build.BUILDS["redisson-fenced"].run(tmp_path)[-1] == "fenced"
    # every other program has a folder of its own
    programs = build.programs()
    for a, fa in folders.items():
        for b, fb in folders.items():
            same = (programs[a].source, programs[a].entry) == (programs[b].source,
                                                                 programs[b].entry)
            assert (fa == fb) == same, (a, b)
