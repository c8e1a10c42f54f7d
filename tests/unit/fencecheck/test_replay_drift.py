"""`fencecheck run --replay` of a shipped finding says which versions it was recorded on that
differ from the installed ones (fencecheck/nemesis/replay.py: drift), and says nothing when they
match or the record names none."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fencecheck.nemesis.replay import drift, recorded_versions
from fencecheck.run.config import make_config
from tests.conftest import REPO

INSTALLED = {"client": "k8s.io/client-go v0.37.2", "kubernetes": "Kubernetes v1.37.2",
             "python": "3.11.2"}


def installed(_: object) -> dict[str, str | None]:
    return INSTALLED


def test_a_different_client_and_server_are_each_named() -> None:
    cfg = make_config(backend="kubernetes", client="client-go")
    recorded = {"client": "k8s.io/client-go v0.34.0", "kubernetes": "Kubernetes v1.33.0",
                "python": "3.12.0"}
    assert drift(cfg, recorded, installed) == [
        "client: recorded k8s.io/client-go v0.34.0, installed k8s.io/client-go v0.37.2",
        "kubernetes: recorded Kubernetes v1.33.0, installed Kubernetes v1.37.2"]


def test_the_same_versions_or_none_recorded_say_nothing() -> None:
    cfg = make_config(backend="kubernetes", client="client-go")
    assert drift(cfg, dict(INSTALLED), installed) == []
    assert drift(cfg, {}, installed) == []
    # a library this machine lacks is named as missing
    assert drift(cfg, {"client": "k8s.io/client-go v0.37.2"}, lambda _: {}) == [
        "client: recorded k8s.io/client-go v0.37.2, installed none"]


def test_recorded_versions_reads_test_json(tmp_path: Path) -> None:
    assert recorded_versions(tmp_path) == {}  # no test.json: nothing to compare
    (tmp_path / "test.json").write_text(json.dumps(
        {"config": {"backend": "kubernetes"}, "versions": {"client": "k8s.io/client-go v0.1"}}))
    assert recorded_versions(tmp_path) == {"client": "k8s.io/client-go v0.1"}


def test_replaying_a_shipped_finding_prints_the_recorded_version_as_it_is(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the client's words carry brackets ("[client-go v0.34.0]"): printed, not taken for markup
    from fencecheck.cli.run import _replayed

    copy = tmp_path / "client-go-release"
    shutil.copytree(REPO / "examples" / "findings" / "client-go-release", copy)
    test = json.loads((copy / "test.json").read_text())
    test["versions"]["client"] = "client-go `leaderelection` [client-go v0.0.1]"
    (copy / "test.json").write_text(json.dumps(test))
    cfg = _replayed(copy, tmp_path / "store")
    assert cfg.replay == (copy / "schedule.json").resolve() and cfg.client == "client-go"
    said = " ".join(capsys.readouterr().err.split())
    assert "client: recorded client-go `leaderelection` [client-go v0.0.1], installed " in said
