"""End to end through `fencecheck run`: PostgreSQL advisory locks (`--backend postgres-advisory`)
and the Python lock libraries (python-redis-lock, aioredlock, etcd3), must-find and must-not.
Real servers in network namespaces, short runs, fixed seeds (a must-find may try a second seed).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.test_run_backends import DAMAGE, kinds, must_find, run

pytestmark = [pytest.mark.netns, pytest.mark.usefixtures("no_leftovers")]

# The holder's critical section (4 writes, 700 ms apart) outlasts the server's detection of a
# silent client (keepalive after a lease of silence, ~2 s for a 1 s lease), so writes go on
# while another client holds the lock.
LONG_SECTION = ("--lease-ms", "1000", "--think-ms", "700", "--writes", "4", "--time-limit", "20")


def test_advisory_lock_holder_cut_off_from_postgres_is_caught(tmp_path: Path) -> None:
    must_find(tmp_path, "pg-partition", DAMAGE - {"double-grant"}, "--backend",
              "postgres-advisory", "--nemesis", "partition", "--fencing", "off", *LONG_SECTION)


def test_advisory_lock_with_a_fencing_counter_survives_the_partition(tmp_path: Path) -> None:
    code, results = run(tmp_path, "pg-counter", "--backend", "postgres-advisory", "--client",
                        "pg-advisory-counter", "--nemesis", "partition", "--fencing", "on",
                        "--seed", "1", *LONG_SECTION)
    assert code == 0, kinds(results)
    assert results["checks"]["fencing"].get("skipped") is None  # tokens were there to judge


def test_advisory_lock_with_idle_session_timeout_loses_a_paused_holder(tmp_path: Path) -> None:
    must_find(tmp_path, "pg-pause", DAMAGE - {"double-grant"}, "--backend", "postgres-advisory",
              "--client-opt", "idle_session_timeout=true", "--nemesis", "pause", "--fencing",
              "off", "--lease-ms", "1000", "--time-limit", "15")


@pytest.mark.parametrize(("backend", "client"), [
    ("redis", "python-redis-lock"), ("redlock", "aioredlock"), ("etcd", "etcd3"),
])
def test_python_lock_library_with_a_paused_holder_is_caught(tmp_path: Path, backend: str,
                                                            client: str) -> None:
    # The renewer thread or task stops with its process; the main thread carries on after.
    must_find(tmp_path, client, DAMAGE - {"double-grant"}, "--backend", backend, "--client",
              client, "--nemesis", "pause", "--fencing", "off", "--lease-ms", "1000",
              "--time-limit", "15")


@pytest.mark.parametrize(("backend", "client"), [
    ("postgres-advisory", "pg-advisory"), ("postgres-advisory", "pg-advisory-counter"),
    ("redis", "python-redis-lock"), ("redlock", "aioredlock"), ("etcd", "etcd3"),
])
def test_no_faults_is_valid(tmp_path: Path, backend: str, client: str) -> None:
    code, results = run(tmp_path, client, "--backend", backend, "--client", client,
                        "--nemesis", "none", "--time-limit", "10", "--lease-ms", "2000")
    assert code == 0, kinds(results)
    assert results["stats"]["ops_by_f"]["acquire"]["ok"] > 0
