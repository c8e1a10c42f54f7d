"""ZooKeeper's dynamic reconfiguration through kazoo, run on a node of the ensemble (a netns node
shares this host's Python): `python -m fencecheck.clusters.services.zk_admin HOSTS reconfig
--leaving SID` (or `--joining SERVER_LINE`) changes the ensemble and prints its new
configuration as one line of JSON: {"config": [server lines], "version": hex}. A failure is one
line on stderr and exit 1. (Reading the configuration needs no client: the servers' `conf`
four-letter word says it.)

`reconfig` writes /zookeeper/config, which only the super user may do (ZooKeeper 3.5.3+): the
servers run with a super digest (`SUPER_DIGEST`) and this client authenticates as that user,
rather than every server running with `skipACL=yes`.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys

SUPER_USER = "super"
# A test ensemble on a run's private network: the password guards against mistakes, not people.
SUPER_PASSWORD = "fencecheck"


def super_digest() -> str:
    """The value of -Dzookeeper.DigestAuthenticationProvider.superDigest for the servers."""
    # SHA-1: ZooKeeper's digest scheme, not a choice
    raw = hashlib.sha1(f"{SUPER_USER}:{SUPER_PASSWORD}".encode()).digest()
    return f"{SUPER_USER}:{base64.b64encode(raw).decode()}"


def parse_config(data: bytes) -> dict[str, object]:
    """The config znode's text: its `server.N=...` lines and its `version=`."""
    lines = data.decode().splitlines()
    servers = [line for line in lines if line.startswith("server.")]
    version = next((line.split("=", 1)[1] for line in lines if line.startswith("version=")), "")
    return {"config": servers, "version": version}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="zk_admin")
    p.add_argument("hosts", help="host:port,... of the servers to ask")
    p.add_argument("command", choices=("reconfig",))
    p.add_argument("--leaving", default=None, help="server ids to remove, comma-separated")
    p.add_argument("--joining", default=None, help="server lines to add, comma-separated")
    p.add_argument("--timeout", type=float, default=10.0)
    a = p.parse_args(argv)
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=a.hosts, timeout=a.timeout,
                     auth_data=[("digest", f"{SUPER_USER}:{SUPER_PASSWORD}")])
    try:
        zk.start(timeout=a.timeout)
        data, _ = zk.reconfig(joining=a.joining, leaving=a.leaving, new_members=None)
    except Exception as e:  # one line for the service's error, whatever kazoo raised
        sys.stderr.write(f"zk_admin {a.command}: {type(e).__name__}: {e}\n")
        return 1
    finally:
        zk.stop()
        zk.close()
    sys.stdout.write(json.dumps(parse_config(data)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
