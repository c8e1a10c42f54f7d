"""The `galera` backend: a lock table (the ShedLock/Quartz pattern) on a 3-node MariaDB Galera
cluster, each worker writing through its own node (workloads/clients/galera.py). Galera
refuses `GET_LOCK` (MDEV-30473), so the table is the lock."""

from __future__ import annotations

from fencecheck.descriptors.base import (
    PAUSE,
    BackendDescriptor,
    ClientDescriptor,
    Need,
    scenario,
)

BACKEND = BackendDescriptor(
    name="galera",
    summary="a lock table on a 3-node MariaDB 10.11 Galera cluster (galera-4)",
    service="fencecheck.clusters.services.galera:GaleraService",
    clients=(
        ClientDescriptor("galera-lock-table",
                         "fencecheck.workloads.clients.galera:GaleraLockTableClient",
                         library="a lock row on Galera (ShedLock's pattern), each worker "
                                 "through its own node",
                         dist="PyMySQL",
                         token="a per-lock counter bumped in the UPDATE that takes the row",
                         comparison=(
                             scenario("none", "must-pass", fencing=None,
                                      note=("The lock table on Galera, each worker writing "
                                            "through its own node."),
                                      lease_ms=2000, time_limit_s=12),
                             scenario("pause", "must-find", lease_ms=2000, time_limit_s=20),
                             scenario("pause", "must-pass", fencing=True,
                                      note=("Fenced by the counter the UPDATE that takes the "
                                            "row bumps."),
                                      lease_ms=2000, time_limit_s=20),
                             scenario("partition", "must-pass", lease_ms=2000, time_limit_s=15),
                         )),
    ),
    token="counter in the lock row",
    nodes=3,
    capabilities=frozenset({PAUSE}),
    service_args=frozenset({"ledger"}),
    # Only the netns runtime: the docker and ssh images carry no MariaDB.
    runtimes=frozenset({"netns"}),
    needs=(Need("mariadb", path="/usr/sbin/mariadbd", package="mariadb-server"),
           Need("galera-4", path="/usr/lib/galera/libgalera_smm.so", package="galera-4"),
           Need("rsync", binary="rsync", package="rsync")),
    version_argv=("/usr/sbin/mariadbd", "--version"),
    python_libs=("pymysql",),
    clock_refusal="MariaDB is not started under the clock shim here",
    weight=3,
)
