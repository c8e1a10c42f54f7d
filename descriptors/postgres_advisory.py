"""The `postgres-advisory` backend: session-level advisory locks on one PostgreSQL server, held
while the session lives; the server's own session timeouts (set per session from the lease, see
workloads/clients/pg_advisory.py) are what take a lock from a holder it cannot reach."""

from __future__ import annotations

from fencecheck.descriptors.base import (
    BackendDescriptor,
    ClientDescriptor,
    Need,
    Program,
    scenario,
)
from fencecheck.descriptors.rows import LONG_SECTION

BACKEND = BackendDescriptor(
    name="postgres-advisory",
    summary="PostgreSQL 15 session-level advisory locks (pg_try_advisory_lock)",
    service="fencecheck.clusters.services.postgres:PostgresService",
    clients=(
        ClientDescriptor(
            "pg-advisory",
            "fencecheck.workloads.clients.pg_advisory:PgAdvisoryClient",
            options="fencecheck.workloads.clients.options:PgAdvisoryOptions",
            library="`pg_try_advisory_lock`, session-level",
            dist="psycopg",
            token=None,
            comparison=(
                scenario("none", "must-pass", fencing=None, time_limit_s=10),
                scenario("pause", "must-pass",
                         note=("A paused process's kernel still answers TCP keepalives: the "
                               "server keeps the session, and with it the advisory lock, for as "
                               "long as the pause lasts. Nobody else gets the lock.")),
                scenario("pause", "must-find", suffix="+idle-timeout",
                         note=("With idle_session_timeout = the lease the server ends a silent "
                               "session: a lease that a paused holder loses, and then writes "
                               "under."),
                         client_options={"idle_session_timeout": True}),
                scenario("partition", "must-find", **LONG_SECTION),
            ),
        ),
        ClientDescriptor(
            "pg-advisory-counter",
            "fencecheck.workloads.clients.pg_advisory:PgAdvisoryCounterClient",
            options="fencecheck.workloads.clients.options:PgAdvisoryOptions",
            library="advisory lock + fencing counter bumped inside it",
            dist="psycopg",
            token="a per-lock counter bumped in the statement that takes the lock",
            comparison=(
                scenario("pause", "must-pass", fencing=True, suffix="+idle-timeout",
                         client_options={"idle_session_timeout": True}),
                scenario("partition", "must-pass", fencing=True, **LONG_SECTION),
            ),
        ),
        ClientDescriptor(
            "shedlock-jdbc",
            "fencecheck.workloads.clients.third_party:ShippedClient",
            library="ShedLock, `JdbcTemplateLockProvider` on PostgreSQL",
            program=Program(
                "java/shedlock-jdbc",
                "maven",
                "ShedLockJdbcClient",
                shared=("java/shedlock-common",),
                pins=("shedlock-provider-jdbc-template", "shedlock"),
            ),
            token=None,
            workloads=frozenset({"cron"}),
            weight=1,
            comparison=(
                scenario("pause", "must-find", fencing=None,
                         note=("the client's clock (ShedLock's default): its unlock is unchecked "
                               "too"),
                         workload="cron", lease_ms=2000, concurrency=3, time_limit_s=20,
                         workload_options={"think_ms": 100, "idempotent": True}),
                scenario("pause", "must-pass", fencing=None, suffix="+db-time",
                         note=("usingDbTime(): the unlock checks locked_by (jobs may still run "
                               "twice)"),
                         workload="cron", client_options={"use_db_time": True}, lease_ms=2000,
                         concurrency=3, time_limit_s=20,
                         workload_options={"think_ms": 100, "idempotent": True}),
            ),
        ),
    ),
    token="pg-advisory-counter: yes",
    nodes=1,
    max_nodes=1,
    service_args=frozenset({"ledger"}),
    needs=(Need("postgresql", path="/usr/lib/postgresql/15/bin/postgres", package="postgresql"),),
    version_argv=("/usr/lib/postgresql/15/bin/postgres", "--version"),
    python_libs=("psycopg",),
    clock_refusal=(
        "PostgreSQL is not started under the clock shim here (its session timeouts are what "
        "end an advisory lock, and those run on the server's own timers)"
    ),
)
