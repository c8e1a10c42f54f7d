"""The built-in resources a lock protects: the fenced store server, PostgreSQL, etcd itself."""

from __future__ import annotations

from fencecheck.descriptors.base import Need, ResourceDescriptor

STORE = ResourceDescriptor(
    name="store",
    spec="fencecheck.workloads.resources.store:StoreResource",
    starter="fencecheck.run.resources:start_store",
    summary="our fenced store server; fencing rejects tokens lower than any seen",
)
POSTGRES = ResourceDescriptor(
    name="postgres",
    spec="fencecheck.workloads.resources.postgres:PgResource",
    starter="fencecheck.run.resources:start_postgres",
    summary="a fence column: UPDATE ... WHERE fence <= $held",
    workloads=frozenset({"lock", "leader"}),
    needs=(Need("postgresql", path="/usr/lib/postgresql/15/bin/postgres", package="postgresql"),),
)
ETCD = ResourceDescriptor(
    name="etcd",
    spec="fencecheck.workloads.resources.etcd:EtcdResource",
    starter="fencecheck.run.resources:start_in_service",
    summary="a transaction guarded by the holder's lock key",
    backends=frozenset({"etcd"}),
    workloads=frozenset({"lock", "leader"}),
)

RESOURCES = (STORE, POSTGRES, ETCD)
