"""The `mariadb` backend: `GET_LOCK` named locks on one MariaDB server, held while the session
lives; the session's `wait_timeout`, set from the lease while a lock is held (see
workloads/clients/mariadb.py), is what takes a lock from a holder the server no longer hears."""

from __future__ import annotations

from fencecheck.descriptors.base import (
    KILL,
    PAUSE,
    BackendDescriptor,
    ClientDescriptor,
    Need,
    scenario,
)
from fencecheck.descriptors.rows import LONG_SECTION

BACKEND = BackendDescriptor(
    name="mariadb",
    summary="MariaDB 10.11 named locks (GET_LOCK / RELEASE_LOCK), one server",
    service="fencecheck.clusters.services.mariadb:MariadbService",
    clients=(
        ClientDescriptor("mariadb-get-lock",
                         "fencecheck.workloads.clients.mariadb:MariadbGetLockClient",
                         options="fencecheck.workloads.clients.options:MariadbOptions",
                         library="MariaDB `GET_LOCK`, session-bound", dist="PyMySQL",
                         token=None,
                         comparison=(
                             scenario("none", "must-pass", fencing=None, time_limit_s=10),
                             scenario("pause", "must-pass",
                                      note=("MariaDB GET_LOCK as PostgreSQL's advisory locks: "
                                            "the keepalive keeps a paused holder's session; with "
                                            "wait_timeout = the lease its silence ends the "
                                            "session, and the lock with it.")),
                             scenario("pause", "must-find", suffix="+wait-timeout",
                                      client_options={"wait_timeout": True}),
                             scenario("partition", "must-find", **LONG_SECTION),
                         )),
        ClientDescriptor("mariadb-get-lock-counter",
                         "fencecheck.workloads.clients.mariadb:MariadbGetLockCounterClient",
                         options="fencecheck.workloads.clients.options:MariadbOptions",
                         library="`GET_LOCK` + fencing counter bumped in the same statement",
                         dist="PyMySQL",
                         token="a per-lock counter bumped in the statement that takes the lock",
                         comparison=(
                             scenario("pause", "must-pass", fencing=True, suffix="+wait-timeout",
                                      client_options={"wait_timeout": True}),
                             scenario("partition", "must-pass", fencing=True, **LONG_SECTION),
                         )),
    ),
    token="mariadb-get-lock-counter: yes",
    nodes=1,
    max_nodes=1,
    capabilities=frozenset({PAUSE, KILL}),
    service_args=frozenset({"ledger"}),
    # Only the netns runtime: the docker and ssh images carry no MariaDB.
    runtimes=frozenset({"netns"}),
    needs=(Need("mariadb", path="/usr/sbin/mariadbd", package="mariadb-server"),),
    version_argv=("/usr/sbin/mariadbd", "--version"),
    python_libs=("pymysql",),
    clock_refusal=(
        "MariaDB is not started under the clock shim here (its wait_timeout is what ends a "
        "GET_LOCK lock, and that runs on the server's own timers)"
    ),
)
