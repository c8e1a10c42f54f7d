"""Wiring of the delay faults (`--nemesis delay`, `delay-service`) into a run: one proxy per
client node on the delayed path, the workers' options rewritten through it, and the nemesis
that holds the current holder's proxy (clusters/delay.py has the why)."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any

from fencecheck.clusters.base import Cluster
from fencecheck.clusters.delay import (
    FAULT_PATHS,
    DelayNemesis,
    DelayProxies,
    late_timeout_s,
    path_targets,
)
from fencecheck.config import ConfigError, RunConfig


def setup_delays(cfg: RunConfig, cluster: Cluster, run_dir: Path, ledger: Any,
                 ropts: dict[str, Any], copts: dict[str, Any],
                 stack: ExitStack) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Start the proxies the run's delay faults need; return the rewritten resource and client
    options and the delay nemeses by fault name (empty when no delay fault is asked for)."""
    nemeses: dict[str, Any] = {}
    hold_s = (cfg.fault_duration_s or cfg.pause_duration_s)[1]
    for fault in cfg.faults:
        path = FAULT_PATHS.get(fault)
        if path is None:
            continue
        opts = ropts if path == "resource" else copts
        targets = path_targets(opts)
        if not targets:
            raise ConfigError(f"bad configuration: nemesis: {fault}: the {path} has no "
                              "address a proxy can stand in front of")
        proxies = DelayProxies(path, targets)
        stack.callback(proxies.stop)
        proxies.start(cluster.clients, run_dir, ledger)
        rewritten = proxies.rewrite(opts, late_timeout_s(cfg.op_timeout_s, hold_s))
        if path == "resource":
            ropts = rewritten
        else:
            copts = rewritten
        nemeses[fault] = DelayNemesis(fault, proxies)
    return ropts, copts, nemeses
