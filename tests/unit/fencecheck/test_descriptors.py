"""The backend, resource and fault descriptors tell the truth: every "module:Class" they name
imports, declared capabilities are implemented, declared constructor arguments are accepted, and
every table that lists backends is derived from them."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fencecheck.clusters.base import Killable, Pausable
from fencecheck.descriptors import catalog
from fencecheck.descriptors.base import KILL, PAUSE
from fencecheck.nemesis.faults.registry import faults
from fencecheck.run import wiring
from fencecheck.workloads import registry
from tests.conftest import REPO

BACKENDS = list(catalog.BUILTIN_BACKENDS)


def load(spec: str) -> Any:
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("b", BACKENDS, ids=lambda b: b.name)
def test_a_backend_descriptor_names_real_classes_and_tells_their_capabilities(b: Any) -> None:
    cls = load(b.service)
    params = set(inspect.signature(cls).parameters)
    assert b.service_args <= params, f"{b.name}: {b.service_args - params} not accepted"
    # what the pause and kill faults call is found through these protocols at run time
    assert (PAUSE in b.capabilities) == issubclass(cls, Pausable)
    assert (KILL in b.capabilities) == issubclass(cls, Killable)
    for c in b.clients:
        client = load(c.spec)
        assert all(hasattr(client, m) for m in ("acquire", "renew", "release", "close"))
    assert 1 <= b.nodes <= b.max_nodes
    # what the machine needs: packages, or a server built here (consul: no package ships it)
    assert (b.needs or b.server_build) and b.version_argv


def test_tables_are_derived_from_the_descriptors() -> None:
    assert list(wiring.SERVICES) == [b.name for b in BACKENDS]
    assert wiring.CLIENTS["redis"][0] == "redis-setnx"  # the default first
    assert registry.CLIENTS["zookeeper-election"].endswith(":ZkElectionClient")
    assert set(registry.RESOURCES) == {"store", "postgres", "etcd"}


@pytest.mark.parametrize("name", ["pause", "partition", "kill", "clock", "failover"])
def test_every_builtin_fault_is_a_plugin_with_the_fault_protocol(name: str) -> None:
    d = faults()[name]
    cls = load(d.factory)
    for m in ("bind", "hold_range_s", "targets", "start", "stop", "heal"):  # the Fault protocol
        assert callable(getattr(cls, m)), m


def test_setup_installs_the_packages_the_descriptors_declare() -> None:
    r = subprocess.run([sys.executable, "-m", "fencecheck.descriptors", "apt"], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    pkgs = r.stdout.split()
    assert r.returncode == 0 and {"redis-server", "etcd-server", "zookeeper"} <= set(pkgs)
    assert "fencecheck.descriptors apt" in (REPO / "scripts" / "setup.sh").read_text()


def test_a_new_descriptor_module_is_found_without_editing_a_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = tmp_path / "fc_more_backends"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mydb.py").write_text(
        "from fencecheck.descriptors.base import BackendDescriptor, ClientDescriptor\n"
        "BACKEND = BackendDescriptor('mydb', 'a test', 'm:S', (ClientDescriptor('c', 'm:C'),),"
        " 'none', 3)\n"
    )
    (pkg / "_private.py").write_text("BACKEND = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = catalog.discover(importlib.import_module("fc_more_backends"), "BACKEND",
                             catalog.BackendDescriptor)
    assert [b.name for b in found] == ["mydb"]
    assert {b.name for b in BACKENDS} <= set(catalog.backends())  # the built-ins, found too


@pytest.mark.parametrize(("backend", "client", "workload"), [
    ("redis", "shedlock", "lock"),  # a lock for one run of a job: cron only
    ("etcd", "etcd-go-election", "lock"),  # an election: leader only
])
def test_a_client_is_refused_for_a_workload_its_descriptor_does_not_list(
        tmp_path: Path, backend: str, client: str, workload: str) -> None:
    from fencecheck.run.config import ConfigError, make_config

    cfg = make_config(backend=backend, client=client, workload=workload, store=tmp_path)
    with pytest.raises(ConfigError, match=f"drives the .* workload, not --workload {workload}"):
        wiring.check_compatible(cfg)
