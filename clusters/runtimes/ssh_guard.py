"""The guard of the ssh runtime: on each remote host, the lock services' ports answer only the
test's own addresses (the server hosts and the controller, where the clients run) and loopback.

Redis runs with protected mode off and no password, PostgreSQL trusts the test network, etcd and
ZooKeeper have no auth: on a netns or container node only this machine reaches them, but on a
remote host the bind address is routable, and anyone on that network could read or write the
lock state and the resource (or be mistaken for a client by the checker's accounting). A chain
FCG-<run> returns for the allowed sources and drops the rest; INPUT jumps to it for the
services' TCP ports only, so nothing else on the host changes. Teardown removes both.
"""

from __future__ import annotations

from collections.abc import Sequence

from fencecheck.clusters.base import Remote

# Redis, Sentinel, PostgreSQL, etcd (client, peer), ZooKeeper (client, quorum, election): the
# services' default ports (clusters/services/).
GUARDED_TCP_PORTS = (6379, 26379, 5432, 2379, 2380, 2181, 2888, 3888)


def guard_chain(run_id: str) -> str:
    return f"FCG-{run_id}"


def _jump(chain: str) -> list[str]:
    ports = ",".join(map(str, GUARDED_TCP_PORTS))
    return ["-p", "tcp", "-m", "multiport", "--dports", ports, "-j", chain]


def guard_rules(chain: str, allowed: Sequence[str]) -> str:
    """iptables-restore input (--noflush) that makes the chain and the jump."""
    lines = ["*filter", f":{chain} - [0:0]", f"-A {chain} -i lo -j RETURN"]
    lines += [f"-A {chain} -s {a}/32 -j RETURN" for a in sorted(set(allowed))]
    lines += [f"-A {chain} -j DROP", "-I INPUT 1 " + " ".join(_jump(chain)), "COMMIT"]
    return "\n".join(lines) + "\n"


def add_guard(remote: Remote, chain: str, allowed: Sequence[str]) -> None:
    remote.run(["iptables-restore", "-w", "--noflush"],
               stdin=guard_rules(chain, allowed).encode())


def remove_guard(remote: Remote, chain: str) -> None:
    """Idempotent: a missing jump or chain is not an error."""
    remote.run(["iptables", "-w", "-D", "INPUT", *_jump(chain)], check=False)
    remote.run(["iptables", "-w", "-F", chain], check=False)
    remote.run(["iptables", "-w", "-X", chain], check=False)
