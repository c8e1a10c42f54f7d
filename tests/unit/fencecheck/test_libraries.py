"""The published comparison's matrix comes from the descriptors (fencecheck/fleet/libraries.py):
examples/libraries.toml is what `fencecheck libraries` writes for the built-in ones, each row a
client's declared scenario, and two scenarios that would share a row name are refused."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import pytest

from fencecheck.descriptors import catalog
from fencecheck.descriptors.base import CatalogError, scenario
from fencecheck.fleet import libraries
from fencecheck.fleet.matrix import load_matrix
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "libraries.toml"


def test_the_example_is_what_the_descriptors_generate() -> None:
    assert EXAMPLE.read_text() == libraries.render(), (
        "examples/libraries.toml is stale: run `fencecheck libraries --out "
        "examples/libraries.toml` (its rows come from the clients' `comparison`)")


def test_every_row_is_a_scenario_of_the_client_it_runs(tmp_path: Path) -> None:
    rows = tomllib.loads(EXAMPLE.read_text())["row"]
    declared = {(r.backend, r.client.name, r.name) for r in libraries.rows()}
    assert {(r["backend"], r["client"], r["name"]) for r in rows} == declared
    m = load_matrix(EXAMPLE, tmp_path / "store", runnable=False)
    assert [r.label for r in m.rows] == [r["name"] for r in rows]
    pg = next(r for r in m.rows if r.label == "partition-pg-advisory")
    assert pg.configs[0].workload_options["think_ms"] == 700  # an owner's option of a row
    assert pg.seeds == (1, 2)


def test_a_scenarios_row_name() -> None:
    assert scenario("pause", "must-find").row_name("etcd") == "pause-etcd"
    assert scenario("partition,kill", "must-pass", fencing=True).row_name("x") == \
        "partition-kill-x-fenced"
    assert scenario("pause", "must-find", suffix="+idle").row_name("pg") == "pause-pg+idle"
    assert scenario("pause", "must-find", name="mine").row_name("pg") == "mine"
    assert scenario("pause", "must-find", section="careless").chapter == "careless"


def test_two_scenarios_with_one_row_name_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    table = dict(catalog.backends())
    redis = table["redis"]
    twin = dataclasses.replace(redis.clients[0],
                               comparison=(scenario("pause", "must-find",
                                                    name="pause-redis-setnx"),))
    monkeypatch.setattr(catalog, "backends",
                        lambda: {**table, "redis": dataclasses.replace(
                            redis, clients=(*redis.clients, twin))})
    with pytest.raises(CatalogError, match="'pause-redis-setnx': declared by redis-setnx and "
                                           "by redis-setnx"):
        libraries.rows()
