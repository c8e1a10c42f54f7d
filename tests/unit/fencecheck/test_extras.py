"""A command or a run that needs a package of an extra says which extra to install: read from the
installed distribution's own metadata, checked before a run creates anything, one line, exit 3."""

from __future__ import annotations

from pathlib import Path

import pytest

from fencecheck.descriptors import extras
from fencecheck.run import wiring
from fencecheck.run.config import ConfigError, make_config


def test_each_lock_library_has_the_extra_of_its_family() -> None:
    assert extras.extra_for("kazoo") == "zookeeper"
    assert extras.extra_for("pydantic") == "run"
    assert extras.extra_for("paramiko") == "ssh"
    assert extras.extra_for("PyMySQL") == "mariadb"
    assert extras.extra_for("msgspec") is None  # the core
    assert extras.install_hint("kubernetes") == "pip install 'fencecheck[kubernetes]'"
    assert extras.install_hint(None) == "pip install 'fencecheck[all]'"


def test_a_module_is_matched_to_its_distribution() -> None:
    assert extras.dist_for_module("redis_lock") == "python-redis-lock"
    assert extras.dist_for_module("nats.js.kv") == "nats-py"
    assert extras.dist_for_module("pymysql") == "pymysql"
    assert extras.dist_for_module("no_such_thing") is None
    assert extras.missing_module_message("kazoo.client", "client zookeeper") == (
        "client zookeeper needs the Python package kazoo, which this install lacks: "
        "pip install 'fencecheck[zookeeper]'")


def test_every_clients_library_is_in_an_extra() -> None:
    from fencecheck.descriptors import catalog

    dists = {c.dist for c in catalog.clients().values() if c.dist is not None}
    assert dists and all(extras.extra_for(d) not in (None, "all", "dev") for d in dists), dists


def test_a_run_whose_client_library_is_missing_is_refused_naming_the_extra(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(wiring, "is_installed", lambda dist: dist != "kazoo")
    cfg = make_config(backend="zookeeper", store=tmp_path)
    with pytest.raises(ConfigError) as e:
        wiring.check_compatible(cfg)
    assert str(e.value) == ("bad configuration: client zookeeper needs the Python package kazoo, "
                            "which this install lacks: pip install 'fencecheck[zookeeper]'")


def test_a_fault_whose_package_is_missing_is_refused_naming_the_extra(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(wiring, "is_installed", lambda dist: dist != "pyfuse3")
    cfg = make_config(nemesis=("lose-unsynced",), store=tmp_path)
    with pytest.raises(ConfigError, match=r"nemesis lose-unsynced needs the Python package "
                                          r"pyfuse3.*fencecheck\[fuse\]"):
        wiring.check_compatible(cfg)


def test_a_lazy_command_whose_module_lacks_a_package_is_listed_and_says_the_extra(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from fencecheck.cli import group
    from fencecheck.cli.app import app

    (tmp_path / "fc_needs_kazoo.py").write_text("import kazoo_not_installed_fc\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(group.LAZY, "zkthing", "fc_needs_kazoo")
    monkeypatch.setattr(extras, "dist_for_module", lambda m: "kazoo")
    runner = CliRunner()
    listing = runner.invoke(app, ["--help"])
    assert "zkthing" in listing.output and "fencecheck[zookeeper]" in listing.output
    r = runner.invoke(app, ["zkthing", "--anything"])
    assert r.exit_code == 3
    assert "needs the Python package kazoo" in r.output and "Traceback" not in r.output


def test_a_runtime_whose_package_is_missing_is_refused_before_a_run_exists(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(wiring, "is_installed", lambda dist: dist != "docker")
    cfg = make_config(runtime="docker", store=tmp_path)
    with pytest.raises(ConfigError, match=r"--runtime docker needs the Python package docker.*"
                                          r"fencecheck\[docker\]"):
        wiring.check_compatible(cfg)
    assert list(tmp_path.iterdir()) == []
