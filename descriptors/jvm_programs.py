"""Shipped JVM programs that clients of two backends share (not a backend: no BACKEND here).
Spring Integration's lock registries and leader initiator are one program, its mode the first
argument, driving PostgreSQL (`postgres-advisory`) or Redis (`redis`); its JDBC mode, like Quartz,
creates its library's tables from the script in the library's jar (java/pg-schema/)."""

from __future__ import annotations

from fencecheck.descriptors.base import Program

PG_SCHEMA = "java/pg-schema"


def spring_program(mode: str) -> Program:
    """The Spring Integration program in `mode` (jdbc, redis, jdbc-leader, redis-leader); the
    comparison names the registry module's pinned version."""
    module = "jdbc" if mode.startswith("jdbc") else "redis"
    return Program("java/spring-integration", "maven", "SpringLockClient", (mode,),
                   shared=(PG_SCHEMA,), pins=(f"spring-integration-{module}",
                                              "spring-integration"))
