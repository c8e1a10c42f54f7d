"""Wiring from a RunConfig to concrete parts: which nodes a backend needs, its lock service, the
options its clients get, and the resource server. The one place that knows every backend."""

from __future__ import annotations

import importlib
import inspect
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fencecheck.clusters.base import ClusterError, LockService, Remote
from fencecheck.config import ConfigError, RunConfig

STORE_PORT = 7000

# backend -> "module:Class" of its LockService, built with `service_options`.
SERVICES: dict[str, str] = {
    "redis": "fencecheck.clusters.redis:RedisService",
    "redlock": "fencecheck.clusters.redis:RedisService",
    "redis-sentinel": "fencecheck.clusters.sentinel:SentinelService",
    "etcd": "fencecheck.clusters.etcd:EtcdService",
    "zookeeper": "fencecheck.clusters.zookeeper:ZookeeperService",
}

# The clients a backend can drive (the first is its default).
CLIENTS: dict[str, tuple[str, ...]] = {
    "redis": ("redis-setnx", "redis-py", "redis-lease"),
    "redlock": ("redlock-ref", "redlock"),
    "redis-sentinel": ("redis-sentinel",),
    "etcd": ("etcd", "etcd-election"),
    "zookeeper": ("zookeeper", "zookeeper-election"),
}


def _load(spec: str) -> Any:
    module, _, name = spec.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"backend not available in this build: {spec} ({e})") from None


RUNTIMES: dict[str, str] = {
    "netns": "fencecheck.clusters.netns:NetnsRuntime",
    "docker": "fencecheck.clusters.docker:DockerRuntime",
    "ssh": "fencecheck.clusters.ssh:SshRuntime",
}


def make_runtime(cfg: RunConfig, run_id: str, run_dir: Path) -> Any:
    """The runtime of cfg.runtime. Every runtime takes (run_id, store, subnet) and the ssh one
    also its connection options; each exposes `setup`, `teardown` and `ledger`."""
    cls = _load(RUNTIMES[cfg.runtime])
    if cfg.runtime == "ssh":
        return cls(run_id, run_dir, hosts=list(cfg.hosts), user=cfg.ssh_user,
                   key=cfg.ssh_key, port=cfg.ssh_port, sudo=cfg.sudo,
                   accept_unknown=cfg.ssh_accept_unknown, known_hosts=cfg.known_hosts)
    return cls(run_id, run_dir, cfg.subnet)


def server_nodes(cfg: RunConfig) -> list[str]:
    return [f"n{i + 1}" for i in range(cfg.node_count)]


def client_nodes(cfg: RunConfig) -> list[str]:
    return [f"c{i + 1}" for i in range(cfg.concurrency)]


RESOURCE_NODE = "r1"


def check_compatible(cfg: RunConfig) -> None:
    """Refuse combinations that cannot run, before anything is created."""
    known = CLIENTS[cfg.backend]
    if ":" not in cfg.client_name and cfg.client_name not in known:
        raise ConfigError(
            f"bad configuration: client: {cfg.client_name!r} does not drive backend "
            f"{cfg.backend!r} (choose one of {', '.join(known)}, or module:Class)"
        )
    if cfg.workload == "cron" and cfg.resource != "store":
        raise ConfigError("bad configuration: resource: the cron workload needs --resource store")
    if cfg.resource == "etcd" and cfg.backend != "etcd":
        raise ConfigError("bad configuration: resource: 'etcd' needs --backend etcd")
    if "clock" in cfg.faults:
        clock = _load("fencecheck.clusters.clock:check_clock_supported")
        try:
            clock(cfg.backend)
        except ClusterError as e:
            raise ConfigError(f"bad configuration: nemesis: {e}") from None


def make_service(cfg: RunConfig, env_for: Any = None, ledger: Any = None) -> LockService:
    cls = _load(SERVICES[cfg.backend])
    kwargs: dict[str, Any] = {}
    if ledger is not None and "ledger" in inspect.signature(cls).parameters:
        kwargs["ledger"] = ledger  # servers outside a namespace are then found by teardown too
    params = inspect.signature(cls).parameters
    if "persistence" in params:
        kwargs["persistence"] = cfg.persistence
    if env_for is not None:
        if "env_for" not in params:
            raise ConfigError(f"bad configuration: nemesis: clock: {cfg.backend} cannot run "
                              "under the clock shim")
        kwargs["env_for"] = env_for
    service: LockService = cls(**kwargs)
    return service


def client_options(cfg: RunConfig, service: LockService) -> dict[str, Any]:
    opts: dict[str, Any] = {"endpoints": service.endpoints(), "op_timeout_s": cfg.op_timeout_s}
    extra = getattr(service, "client_options", None)
    if callable(extra):
        opts.update(extra())
    opts.update(cfg.client_options)
    return opts


@dataclass(slots=True)
class ResourcePlan:
    """How to start the protected resource and what its clients get."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)
    service: LockService | None = None


def store_argv(remote: Remote, fencing: bool, log: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "fencecheck.workloads.store",
        "--host",
        remote.address,
        "--port",
        str(STORE_PORT),
        "--fencing",
        "on" if fencing else "off",
        "--log",
        str(log),
    ]


def make_resource_service(cfg: RunConfig) -> LockService | None:
    """The resource's own server where it needs one beside the store (postgres)."""
    if cfg.resource == "postgres":
        service: LockService = _load("fencecheck.clusters.postgres:PostgresService")()
        return service
    return None
