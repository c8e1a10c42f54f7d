"""PgResource against a real PostgreSQL: the fence column refuses lower tokens on writes and
reads (StaleToken), fencing off accepts them, and failures map to fail/info."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from fencecheck.clusters.services.postgres import PostgresService
from fencecheck.workloads.base import DefiniteFailure, StaleToken
from fencecheck.workloads.resources.postgres import TABLE, PgResource
from tests.backends import pg_server, store_dir

__all__ = ["pg_server", "store_dir"]


@pytest.fixture
def resource(pg_server: PostgresService) -> Iterator[Any]:
    made: list[PgResource] = []

    def make(fencing: bool = True) -> PgResource:
        r = PgResource(
            {"endpoints": pg_server.endpoints(), "op_timeout_s": 2.0, "fencing": fencing}
        )
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


def _row(pg_server: PostgresService, key: str) -> tuple[Any, ...] | None:
    with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
        return conn.execute(f"SELECT value, fence FROM {TABLE} WHERE key = %s", (key,)).fetchone()


def test_fence_rejects_lower_tokens(pg_server: PostgresService, resource: Any) -> None:
    old, new = resource(), resource()
    assert old.read("a", 5, "a") is None  # a fresh key reads as None ...
    assert _row(pg_server, "a") == (None, 5)  # ... and the read raised the fence
    old.write("a", 1, 5, "a")
    assert old.read("a", 5, "a") == 1
    new.write("a", 2, 9, "a")
    with pytest.raises(StaleToken):
        old.write("a", 3, 5, "a")
    with pytest.raises(StaleToken):
        old.read("a", 5, "a")
    with pytest.raises(StaleToken):
        old.write("a", 3, None, "a")
    assert _row(pg_server, "a") == (2, 9)
    assert new.read("a", 9, "a") == 2  # an equal token is the same holder: allowed
    assert old.read("a", None, "a") == 2  # the observer's read raises no fence
    assert _row(pg_server, "a") == (2, 9)


def test_a_read_by_a_newer_holder_fences_the_older(
    pg_server: PostgresService, resource: Any
) -> None:
    old, new = resource(), resource()
    old.write("b", 1, 3, "b")
    assert new.read("b", 4, "b") == 1
    with pytest.raises(StaleToken):
        old.write("b", 2, 3, "b")


def test_fencing_off_accepts_lower_tokens(pg_server: PostgresService, resource: Any) -> None:
    r = resource(False)
    r.write("c", 1, 9, "c")
    r.write("c", 2, 1, "c")
    r.write("c", 3, None, "c")
    assert r.read("c", 1, "c") == 3
    assert _row(pg_server, "c") == (3, 0)


def test_unreachable_server_is_a_definite_failure() -> None:
    r = PgResource({"endpoints": ["127.0.46.20:5432"], "op_timeout_s": 0.5})
    try:
        with pytest.raises(DefiniteFailure) as e:
            r.write("k", 1, 1, "k")
        assert e.value.error == "connection-refused"
    finally:
        r.close()
