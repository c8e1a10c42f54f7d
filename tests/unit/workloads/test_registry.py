"""Tests of workloads/registry.py: names, plugins, and the error for a bad name."""

from __future__ import annotations

import pytest

from fencecheck.workloads.base import WorkloadError
from fencecheck.workloads.clients.redis import RedisPyClient, SetnxClient
from fencecheck.workloads.registry import CLIENTS, RESOURCES, load_class, make_client, make_resource
from fencecheck.workloads.resources.store import StoreResource

OPTS = {"endpoints": ["127.0.0.1:1"], "op_timeout_s": 0.5}


def test_builtin_names_build_without_connecting() -> None:
    assert isinstance(make_client("redis-setnx", OPTS), SetnxClient)
    assert isinstance(make_client("redis-py", OPTS), RedisPyClient)
    assert isinstance(make_resource("store", {"address": "127.0.0.1:1"}), StoreResource)


def test_every_registered_name_imports() -> None:
    for spec in [*CLIENTS.values(), *RESOURCES.values()]:
        assert isinstance(load_class(spec), type)


def test_plugin_name() -> None:
    client = make_client("fencecheck.workloads.clients.redis:SetnxClient", OPTS)
    assert isinstance(client, SetnxClient)


def test_unknown_name_lists_known_names() -> None:
    with pytest.raises(WorkloadError) as e:
        make_client("zookeper", OPTS)
    assert "redis-setnx" in str(e.value) and "redis-py" in str(e.value)
    with pytest.raises(WorkloadError, match="store"):
        make_resource("sql", {})


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("no_such_module_fc:X", "cannot import"),
        ("fencecheck.workloads.resources.store:NoSuchClass", "has no"),
        ("fencecheck.workloads.resources.store:log", "not a class"),
        (":X", "module:Class"),
    ],
)
def test_bad_plugins(spec: str, match: str) -> None:
    with pytest.raises(WorkloadError, match=match):
        make_client(spec, OPTS)


def test_bad_options() -> None:
    with pytest.raises(WorkloadError, match="endpoints"):
        make_client("redis-setnx", {})
    with pytest.raises(WorkloadError, match="host:port"):
        make_client("redis-setnx", {"endpoints": ["nohost"]})
    with pytest.raises(WorkloadError, match="op_timeout_s"):
        make_client("redis-setnx", {**OPTS, "op_timeout_s": "soon"})
