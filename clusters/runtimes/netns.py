"""`NetnsRuntime`: nodes as Linux network namespaces on a private bridge, on this host.

Layout of one run (run id R, e.g. "3fa9c1"):

    fc-R-sw          the switch namespace: bridge `br0` and one veth end per node
    fc-R-<node>      one namespace per node: `lo` up and `eth0` with the node's address
    fcR-<node>       the switch-side veth end of a node (or fcR-<index> if the node name is long)

The bridge lives in its own namespace, so nothing is added to the host's network: no route
leads out of the machine, and the host netns gets no interface or address. Addresses come from
`subnet` in order, servers first, then clients (.2, .3, ...); `.1` is left unused.

Why the `ip` command and not pyroute2: pyroute2 is not installed, and `ip -batch -` does the
whole switch namespace in one process, so setup is a handful of processes whatever the cluster
size: N + 2 processes (measured: 22 ms for 3 nodes, 40 ms for 8).

Every namespace and veth is recorded in the run's ledger (clusters/cleaner.py) before it is
created; `teardown` replays the ledger, so it is idempotent and also works after a crash through
`clusters.cleaner.teardown_run(run_id)`.

What the controller uses, besides `setup`/`teardown`:
- `address(node)`: the node's IP address; `namespace(node)`: its namespace name;
- `remote(node)`: a `LocalRemote` for any node (servers and clients), e.g. for `IptablesNet`;
- `ledger`: the run's `Ledger`, to pass to lock services (`RedisService(ledger=...)`);
- `switch`: the switch namespace name.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from fencecheck.clusters.base import Cluster, ClusterError, CommandResult, RemoteError
from fencecheck.clusters.cleaner import Ledger, TeardownError, check_run_id, teardown_records
from fencecheck.clusters.runtimes.local import LocalRemote
from fencecheck.clusters.runtimes.zygote import Zygote

log = logging.getLogger(__name__)

NODE_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
DEFAULT_SUBNET = "10.77.0.0/24"
IFNAMSIZ = 15  # Linux interface names are at most 15 characters


def namespace_name(run_id: str, node: str) -> str:
    return f"fc-{run_id}-{node}"


def veth_name(run_id: str, node: str, index: int) -> str:
    name = f"fc{run_id}-{node}"
    return name if len(name) <= IFNAMSIZ else f"fc{run_id}-{index}"


class NetnsRuntime:
    """Runtime on network namespaces; needs root and iproute2. See the module docstring."""

    name = "netns"

    def __init__(self, run_id: str, run_dir: Path, subnet: str | None = None) -> None:
        self.run_id = check_run_id(run_id)
        self.run_dir = run_dir
        # Every run may use the same range: the bridge is in the run's own switch namespace.
        self.net = ipaddress.ip_network(subnet or DEFAULT_SUBNET)
        self.switch = namespace_name(run_id, "sw")
        self.ledger = Ledger(run_dir / "ledger.jsonl", run_id)
        self._remotes: dict[str, LocalRemote] = {}
        self._addresses: dict[str, str] = {}
        self._zygote: Zygote | None = None
        self._zygote_lock = threading.Lock()

    # --- naming and lookup ---------------------------------------------------------------

    def namespace(self, node: str) -> str:
        return namespace_name(self.run_id, node)

    def address(self, node: str) -> str:
        try:
            return self._addresses[node]
        except KeyError:
            raise ClusterError(f"no node {node!r} in run {self.run_id}") from None

    def remote(self, node: str) -> LocalRemote:
        try:
            return self._remotes[node]
        except KeyError:
            raise ClusterError(f"no node {node!r} in run {self.run_id}") from None

    def nodes(self) -> list[str]:
        return list(self._remotes)

    # --- setup / teardown -----------------------------------------------------------------

    def setup(self, servers: Sequence[str], clients: Sequence[str]) -> Cluster:
        nodes = [*servers, *clients]
        self._validate(nodes)
        hosts = self.net.hosts()
        next(hosts)  # .1 stays free (a gateway nobody has: there is no way out)
        addrs = {node: str(next(hosts)) for node in nodes}
        prefixlen = self.net.prefixlen
        t0 = time.monotonic()

        namespaces = [self.switch, *(self.namespace(n) for n in nodes)]
        for ns in namespaces:
            self.ledger.record("netns", ns)
        _ip(["-batch", "-"], "".join(f"netns add {ns}\n" for ns in namespaces))

        # The switch: a bridge and every node's veth pair, created from inside the switch
        # namespace with the peer sent straight into the node's namespace, so no interface
        # ever appears in the host netns.
        lines = ["link set lo up", "link add br0 type bridge", "link set br0 up"]
        for i, node in enumerate(nodes):
            veth = veth_name(self.run_id, node, i)
            self.ledger.record("veth", veth, ns=self.switch, node=node)
            lines += [
                f"link add {veth} type veth peer name eth0 netns {self.namespace(node)}",
                f"link set {veth} master br0",
                f"link set {veth} up",
            ]
        _ip(["-n", self.switch, "-batch", "-"], "\n".join(lines) + "\n")

        procs = []
        for node in nodes:
            batch = (
                "link set lo up\n"
                f"addr add {addrs[node]}/{prefixlen} dev eth0\n"
                "link set eth0 up\n"
            )
            # One `ip -n NS -batch` per node, all in flight at once.
            p = subprocess.Popen(
                ["ip", "-n", self.namespace(node), "-batch", "-"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            assert p.stdin is not None
            p.stdin.write(batch.encode())
            p.stdin.close()
            procs.append((node, p))
        for node, p in procs:
            assert p.stderr is not None
            err = p.stderr.read()  # small: at most a few error lines
            p.stderr.close()
            if p.wait() != 0:
                argv = ("ip", "-n", self.namespace(node), "-batch", "-")
                res = CommandResult(node, argv, p.returncode, "", err.decode())
                raise RemoteError(res, "configuring the node's interfaces failed")

        self._addresses = addrs
        cluster = Cluster()
        for node in nodes:
            r = LocalRemote(node, addrs[node], prefix=["ip", "netns", "exec", self.namespace(node)],
                            zygote=self.zygote if node in clients else None)
            self._remotes[node] = r
        for node in servers:
            cluster.servers[node] = self._remotes[node]
        for node in clients:
            cluster.clients[node] = self._remotes[node]
        log.info(
            "netns run %s: %d nodes on %s in %.0f ms",
            self.run_id, len(nodes), self.net, 1000 * (time.monotonic() - t0),
        )
        return cluster

    def zygote(self) -> Zygote:
        """The run's zygote, which forks its client workers (runtimes/zygote.py); started at
        the first call and recorded in the ledger, ended by `teardown`."""
        with self._zygote_lock:
            if self._zygote is None:
                z = Zygote(self.run_dir / "zygote.log")
                try:
                    self.ledger.record_process("host", "zygote", z.pid)
                except BaseException:
                    z.close()
                    raise
                self._zygote = z
            return self._zygote

    def teardown(self) -> None:
        """Undo everything in the run's ledger (processes, chains, namespaces), then drop the
        run from the global index. Idempotent. Call it last: it kills what is left."""
        errors: list[str] = []
        with self._zygote_lock:
            z, self._zygote = self._zygote, None
        if z is not None:
            z.close()  # it kills what it forked that still lives
        removed = teardown_records(self.ledger.records(), errors)
        log.info("netns run %s: removed %d resources", self.run_id, len(removed))
        if errors:
            raise TeardownError(errors)  # the run stays in the index, for `fencecheck teardown`
        self.ledger.unregister()

    def _validate(self, nodes: list[str]) -> None:
        if self._remotes:
            raise ClusterError(f"netns run {self.run_id} is already set up")
        if len(set(nodes)) != len(nodes):
            raise ClusterError(f"duplicate node names: {nodes}")
        for node in nodes:
            if not NODE_RE.match(node) or node == "sw":
                raise ClusterError(f"bad node name {node!r}: want [a-z0-9-], not 'sw'")
        if len(nodes) > self.net.num_addresses - 3:
            raise ClusterError(f"{len(nodes)} nodes do not fit in {self.net}")


def _ip(args: list[str], stdin: str) -> None:
    argv = ["ip", *args]
    log.debug("host: %s <<< %r", argv, stdin)
    p = subprocess.run(argv, input=stdin.encode(), capture_output=True)
    if p.returncode != 0:
        res = CommandResult("host", tuple(argv), p.returncode, p.stdout.decode(), p.stderr.decode())
        raise RemoteError(res, "ip batch failed")

