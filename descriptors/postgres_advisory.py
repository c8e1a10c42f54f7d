"""The `postgres-advisory` backend: session-level advisory locks on one PostgreSQL server, held
while the session lives; the server's own session timeouts (set per session from the lease, see
workloads/clients/pg_advisory.py) are what take a lock from a holder it cannot reach."""

from __future__ import annotations

from fencecheck.descriptors.base import BackendDescriptor, ClientDescriptor, Need, Program
from fencecheck.descriptors.jvm_programs import PG_SCHEMA, spring_program

BACKEND = BackendDescriptor(
    name="postgres-advisory",
    summary="PostgreSQL 15 session-level advisory locks (pg_try_advisory_lock)",
    service="fencecheck.clusters.services.postgres:PostgresService",
    clients=(
        ClientDescriptor(
            "pg-advisory",
            "fencecheck.workloads.clients.pg_advisory:PgAdvisoryClient",
            library="`pg_try_advisory_lock`, session-level",
            dist="psycopg",
            token=None,
        ),
        ClientDescriptor(
            "pg-advisory-counter",
            "fencecheck.workloads.clients.pg_advisory:PgAdvisoryCounterClient",
            library="advisory lock + fencing counter bumped inside it",
            dist="psycopg",
            token="a per-lock counter bumped in the statement that takes the lock",
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
        ),
        # Quartz's clustered scheduler: its cluster decides which instance executes a firing
        ClientDescriptor(
            "quartz",
            "fencecheck.workloads.clients.third_party:ShippedClient",
            library="Quartz clustered `JobStoreTX` (a job per firing)",
            program=Program("java/quartz", "maven", "QuartzClient", shared=(PG_SCHEMA,),
                            pins=("quartz", "quartz")),
            token=None,
            workloads=frozenset({"cron"}),
            settings_check="fencecheck.workloads.clients.jvm_settings:check_quartz",
            weight=1,
        ),
        ClientDescriptor(
            "spring-jdbc",
            "fencecheck.workloads.clients.third_party:ShippedClient",
            library="Spring Integration `JdbcLockRegistry` (INT_LOCK, TTL)",
            program=spring_program("jdbc"),
            token=None,
            workloads=frozenset({"lock"}),
            settings_check="fencecheck.workloads.clients.jvm_settings:check_spring",
            weight=1,
        ),
        ClientDescriptor(
            "spring-jdbc-leader",
            "fencecheck.workloads.clients.third_party:ShippedClient",
            library="Spring Integration `LockRegistryLeaderInitiator` over `JdbcLockRegistry`",
            program=spring_program("jdbc-leader"),
            token=None,
            workloads=frozenset({"leader"}),
            settings_check="fencecheck.workloads.clients.jvm_settings:check_spring_leader",
            weight=1,
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
