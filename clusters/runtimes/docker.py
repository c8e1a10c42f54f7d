"""`DockerRuntime`: server nodes as Docker containers on an `internal` network; client nodes as
network namespaces on this host joined to that network's bridge.

Layout of one run (run id R):

    fc-R             the Docker network: `internal` (no route out), subnet as given or else a
                     free /24 of 10.96.0.0/12 taken under a machine-wide lock (`take_subnet`:
                     two runs at once never share one), bridge
                     `fcR-br` in the host netns (named by us, so it is findable), gateway `.1`
    fc-R-<node>      one container per server node (image `fencecheck-node:<hash>`, see
                     clusters/runtimes/image.py), `sleep infinity` under docker-init, NET_ADMIN
    fc-R-<client>    one namespace per client node, its veth `fcR-<client>` on the bridge

Every container and the network carry the label `fencecheck.run=R` and are recorded in the
run's ledger before they are created (kinds `docker-container`, `docker-network`); their undo
removes by label, so `fencecheck teardown` also finds containers a crash left unrecorded.

Files: the run's store directory is bind-mounted into every container at the same path, so the
services' configs, data and logs (`<run dir>/nodes/<node>/...`) are written straight into the store
and `put_file`/`get_file` under it are plain copies. The project and its Python are mounted
read-only at their host paths too, so the resource server
(`sys.executable -m fencecheck.workloads.resources.store`)
runs in a container unchanged.

Commands enter a container's namespaces with `nsenter` on its init pid rather than `docker exec`
(measured: a median 4 ms against 74 ms a command; readiness polls run dozens): its mount, uts, ipc
and network namespaces. Containers share this host's pid namespace (`pid_mode=host`), so a
daemon's pid is one pid everywhere: in `Daemon.pid`, `signal`, `alive` and the ledger, and in
what the server reports of itself (redis's `process_id`, which RedisService checks); and
`/proc/self` resolves inside a container (java finds libjli.so through it). Such a daemon does
not die with its container by itself: the container undo first kills every process in the
container's network namespace, so a crash between starting a daemon and recording it leaves
nothing behind.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import ipaddress
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fencecheck.clusters.base import Cluster, ClusterError, CommandResult, Daemon, RemoteError
from fencecheck.clusters.cleaner import (
    Ledger,
    TeardownError,
    check_run_id,
    kill_pids,
    register_undo,
    teardown_records,
)
from fencecheck.clusters.runtimes.local import LocalRemote
from fencecheck.clusters.runtimes.netns import NODE_RE, namespace_name, veth_name

log = logging.getLogger(__name__)

LABEL = "fencecheck.run"
PROJECT = Path(__file__).resolve().parents[2]  # clusters/runtimes/docker.py -> the checkout
NSENTER = ("-m", "-u", "-i", "-n")


def network_name(run_id: str) -> str:
    return f"fc-{run_id}"


def bridge_name(run_id: str) -> str:
    return f"fc{run_id}-br"  # at most 13 characters: within IFNAMSIZ


def container_name(run_id: str, node: str) -> str:
    return namespace_name(run_id, node)


SUBNET_POOL = ipaddress.IPv4Network("10.96.0.0/12")  # 4,096 /24s, none of them 10.77.0.0/24
SUBNET_LOCK = Path("/run/fencecheck/docker-subnets.lock")


def take_subnet(client: Any, run_id: str,
                create: Callable[[ipaddress.IPv4Network], None]) -> ipaddress.IPv4Network:
    """A /24 of SUBNET_POOL that no Docker network on this machine holds, with the network
    made on it by `create`, under a machine-wide lock (flock), so two runs started at once never
    pick the same one. The search starts at a /24 derived from the run id, so runs spread out."""
    import docker.errors

    taken: set[ipaddress.IPv4Network | ipaddress.IPv6Network] = set()
    SUBNET_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(SUBNET_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for net in client.networks.list():
            for pool in (net.attrs.get("IPAM") or {}).get("Config") or []:
                with contextlib.suppress(KeyError, ValueError):
                    taken.add(ipaddress.ip_network(pool["Subnet"], strict=False))
        subnets = list(SUBNET_POOL.subnets(new_prefix=24))
        start = int(run_id, 36) % len(subnets)  # run ids are [0-9a-z] (check_run_id)
        for i in range(len(subnets)):
            net = subnets[(start + i) % len(subnets)]
            if any(net.overlaps(t) for t in taken):
                continue
            try:
                create(net)
            except docker.errors.APIError as e:  # held by something docker did not list
                if "overlap" not in str(e).lower():
                    raise
                continue
            return net
    raise ClusterError(f"docker: every /24 of {SUBNET_POOL} is held by another network")


def docker_client() -> Any:
    """A Docker SDK client, or ClusterError saying dockerd is not reachable."""
    import docker
    import docker.errors

    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except (docker.errors.DockerException, OSError) as e:
        raise ClusterError(
            f"docker: cannot reach dockerd ({e}); start it (scripts/dockerd.sh start)"
        ) from None
    return client


class DockerRemote(LocalRemote):
    """A container, through nsenter on its init pid. Pids in and out are host pids."""

    def __init__(self, name: str, address: str, container: str, init_pid: int,
                 shared: Sequence[Path]) -> None:
        # Commands run in the controller's working directory where the container has it (an
        # ancestor of the store's mount), so a store given as a relative path works inside.
        here = Path.cwd().resolve()
        # (`env -C` inside, not nsenter's --wd: that one opens the directory on this host.)
        wd = ["env", "-C", str(here)] if any(s.is_relative_to(here) for s in shared) else []
        super().__init__(name, address,
                         prefix=["nsenter", "-t", str(init_pid), *NSENTER, "--", *wd])
        self.container = container
        self.init_pid = init_pid
        self.shared = tuple(shared)

    def start_daemon(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log: Path,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> Daemon:
        log.parent.mkdir(parents=True, exist_ok=True)
        script = ('cd "$1" || exit 1; log=$2; shift 2; '
                  'setsid "$@" </dev/null >>"$log" 2>&1 & echo $!')
        full = [*self.prefix, "sh", "-c", script, "sh", cwd or ".", str(log), *argv]
        logging.getLogger(__name__).debug("%s: daemon %s: %s", self.name, name, full)
        # The JVM maps its cgroup (this host's, as nsenter leaves it) onto the container's
        # cgroup mounts, finds none and dies of a NullPointerException: no container support.
        env = {"JAVA_TOOL_OPTIONS": "-XX:-UseContainerSupport", **(env or {})}
        p = subprocess.run(full, capture_output=True, text=True, timeout=30,
                           stdin=subprocess.DEVNULL, env={**os.environ, **env})
        out = p.stdout.strip()
        if p.returncode != 0 or not out.isdigit():
            res = CommandResult(self.name, tuple(argv), p.returncode, p.stdout, p.stderr)
            raise RemoteError(res, f"could not start daemon {name}")
        pid = int(out)
        return Daemon(node=self.name, name=name, pid=pid, log=log)

    def _is_shared(self, path: str) -> bool:
        p = Path(path).resolve()
        return any(p.is_relative_to(s) for s in self.shared)

    def put_file(self, local: Path, path: str) -> None:
        if self._is_shared(path):
            super().put_file(local, path)
            return
        self.run(["sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "sh", path],
                 stdin=local.read_bytes())

    def get_file(self, path: str, local: Path) -> None:
        if self._is_shared(path):
            super().get_file(path, local)
            return
        data = self.run(["cat", path]).stdout
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(data)


class DockerRuntime:
    """Runtime on Docker containers; needs root (namespaces for clients) and a local dockerd."""

    name = "docker"

    def __init__(self, run_id: str, run_dir: Path, subnet: str | None = None,
                 *, image: str | None = None) -> None:
        self.run_id = check_run_id(run_id)
        self.run_dir = run_dir
        # None: a /24 of SUBNET_POOL no Docker network holds, taken when the network is made.
        self.subnet = ipaddress.IPv4Network(subnet) if subnet is not None else None
        self.image = image
        self.ledger = Ledger(run_dir / "ledger.jsonl", run_id)
        self.network = network_name(run_id)
        self.bridge = bridge_name(run_id)
        self._remotes: dict[str, LocalRemote] = {}
        self._client: Any = None

    def address(self, node: str) -> str:
        return self.remote(node).address

    def remote(self, node: str) -> LocalRemote:
        try:
            return self._remotes[node]
        except KeyError:
            raise ClusterError(f"no node {node!r} in run {self.run_id}") from None

    def setup(self, servers: Sequence[str], clients: Sequence[str]) -> Cluster:
        import docker.errors

        try:
            return self._setup(servers, clients)
        except docker.errors.APIError as e:  # e.g. the subnet overlaps another network's
            raise ClusterError(f"docker: {e.explanation or e}") from None

    def _setup(self, servers: Sequence[str], clients: Sequence[str]) -> Cluster:
        nodes = [*servers, *clients]
        self._validate(nodes)
        from docker.types import IPAMConfig, IPAMPool

        from fencecheck.clusters.runtimes.image import ensure_image

        self._client = client = docker_client()
        image = self.image or ensure_image(client)
        t0 = time.monotonic()

        labels = {LABEL: self.run_id}
        self.ledger.record("docker-network", self.network)

        def create(net: ipaddress.IPv4Network) -> None:
            gateway = str(next(net.hosts()))
            ipam = IPAMConfig(pool_configs=[IPAMPool(subnet=str(net), gateway=gateway)])
            client.networks.create(
                self.network, driver="bridge", internal=True, ipam=ipam, labels=labels,
                options={"com.docker.network.bridge.name": self.bridge},
            )

        if self.subnet is None:
            self.subnet = take_subnet(client, self.run_id, create)
        else:
            create(self.subnet)
        self.ledger.record("docker-subnet", str(self.subnet))
        hosts = self.subnet.hosts()
        next(hosts)  # the gateway's
        addrs = {node: str(next(hosts)) for node in nodes}
        shared = self._mounts()
        # Containers start in parallel (dockerd takes ~0.4 s a start here), and the client
        # namespaces, which need only the bridge, are made meanwhile.
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(servers) + 1) as ex:
            futs = {n: ex.submit(self._container, client, image, n, addrs[n], shared)
                    for n in servers}
            namespaces = ex.submit(self._clients, clients, addrs)
            pids = {n: f.result() for n, f in futs.items()}
            namespaces.result()

        cluster = Cluster()
        for n in servers:
            r = DockerRemote(n, addrs[n], container_name(self.run_id, n), pids[n], shared)
            self._remotes[n] = cluster.servers[n] = r
        for n in clients:
            ns = namespace_name(self.run_id, n)
            c = LocalRemote(n, addrs[n], prefix=["ip", "netns", "exec", ns])
            self._remotes[n] = cluster.clients[n] = c
        log.info("docker run %s: %d containers and %d client namespaces in %.0f ms on %s",
                 self.run_id, len(servers), len(clients), 1000 * (time.monotonic() - t0),
                 self.subnet)
        return cluster

    def _mounts(self) -> list[Path]:
        """Host directories every container sees at the same path: the store (rw), then the
        project and its Python (ro; see the module docstring)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        out = [self.run_dir.resolve()]
        for p in (PROJECT, Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()):
            if not any(p.is_relative_to(q) for q in out[1:]):
                out.append(p)
        return out

    def _container(self, client: Any, image: str, node: str, addr: str,
                   shared: list[Path]) -> int:
        name = container_name(self.run_id, node)
        self.ledger.record("docker-container", name, node=node)
        api = client.api
        binds = {str(shared[0]): {"bind": str(shared[0]), "mode": "rw"}}
        binds.update({str(p): {"bind": str(p), "mode": "ro"} for p in shared[1:]})
        host_config = api.create_host_config(
            binds=binds, cap_add=["NET_ADMIN"], init=True, network_mode=self.network,
            pid_mode="host",
        )
        netcfg = api.create_networking_config(
            {self.network: api.create_endpoint_config(ipv4_address=addr)}
        )
        cid = api.create_container(
            image, command=["sleep", "infinity"], name=name, hostname=node,
            labels={LABEL: self.run_id, "fencecheck.node": node},
            host_config=host_config, networking_config=netcfg,
        )["Id"]
        api.start(cid)
        pid = int(api.inspect_container(cid)["State"]["Pid"])
        if pid <= 0:
            raise ClusterError(f"docker: container {name} did not start")
        # An internal network still gives a default route to the gateway (this host's bridge
        # address); drop it, so nothing in a node can route past the subnet.
        _ip(["route", "del", "default"], "", prefix=["nsenter", "-t", str(pid), "-n"])
        return pid

    def _clients(self, clients: Sequence[str], addrs: Mapping[str, str]) -> None:
        """One namespace per client with a veth on the network's bridge."""
        if not clients:
            return
        namespaces = [namespace_name(self.run_id, c) for c in clients]
        for ns in namespaces:
            self.ledger.record("netns", ns)
        lines = [f"netns add {ns}" for ns in namespaces]
        for i, (c, ns) in enumerate(zip(clients, namespaces, strict=True)):
            veth = veth_name(self.run_id, c, 100 + i)
            self.ledger.record("host-veth", veth, node=c)
            lines += [
                f"link add {veth} type veth peer name eth0 netns {ns}",
                f"link set {veth} master {self.bridge}",
                f"link set {veth} up",
            ]
        _ip(["-batch", "-"], "\n".join(lines) + "\n")
        assert self.subnet is not None  # taken in _setup
        plen = self.subnet.prefixlen
        for c, ns in zip(clients, namespaces, strict=True):
            _ip(["-n", ns, "-batch", "-"],
                f"link set lo up\naddr add {addrs[c]}/{plen} dev eth0\nlink set eth0 up\n")

    def teardown(self) -> None:
        """Undo the ledger LIFO (processes, containers, the network, then namespaces), then drop
        the run from the global index. Idempotent."""
        errors: list[str] = []
        removed = teardown_records(self.ledger.records(), errors)
        log.info("docker run %s: removed %d resources", self.run_id, len(removed))
        if errors:
            raise TeardownError(errors)
        self.ledger.unregister()

    def _validate(self, nodes: list[str]) -> None:
        if self._remotes:
            raise ClusterError(f"docker run {self.run_id} is already set up")
        if len(set(nodes)) != len(nodes):
            raise ClusterError(f"duplicate node names: {nodes}")
        for node in nodes:
            if not NODE_RE.match(node) or node in ("sw", "br"):
                raise ClusterError(f"bad node name {node!r}: want [a-z0-9-], not 'sw' or 'br'")
        room = self.subnet.num_addresses if self.subnet is not None else 256
        if len(nodes) > room - 3:
            raise ClusterError(f"{len(nodes)} nodes do not fit in {self.subnet or 'a /24'}")


def _ip(args: list[str], stdin: str, prefix: Sequence[str] = ()) -> None:
    argv = [*prefix, "ip", *args]
    log.debug("host: %s <<< %r", argv, stdin)
    p = subprocess.run(argv, input=stdin.encode(), capture_output=True)
    if p.returncode != 0:
        res = CommandResult("host", tuple(argv), p.returncode, p.stdout.decode(), p.stderr.decode())
        raise RemoteError(res, "ip batch failed")


# --- undo of this runtime's ledger records (clusters/cleaner.py) -------------------------------


def _run_of(rec: Mapping[str, Any]) -> str:
    return check_run_id(str(rec["run"]))


def _undo_containers(rec: Mapping[str, Any]) -> str | None:
    """Remove every container labelled with the record's run (by label, not by name: a crash
    between create and record cannot hide one). Force-removal kills what runs inside."""
    import docker.errors

    client = docker_client()
    gone = []
    for c in client.containers.list(all=True, filters={"label": f"{LABEL}={_run_of(rec)}"}):
        pid = int(c.attrs.get("State", {}).get("Pid") or 0)
        if pid > 0:
            kill_pids([p for p in netns_members(pid) if p != pid])
        with contextlib.suppress(docker.errors.NotFound):
            c.remove(force=True)
            gone.append(c.name)
    return f"containers {', '.join(gone)}" if gone else None


def netns_members(pid: int) -> list[int]:
    """Host pids in the network namespace of pid (daemons we started in its container)."""
    try:
        ns = os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return []
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}/ns/net").st_ino == ns:
                    out.append(int(entry))
    return out


def _undo_network(rec: Mapping[str, Any]) -> str | None:
    import docker.errors

    _undo_containers(rec)  # a network with endpoints cannot be removed
    client = docker_client()
    gone = []
    for n in client.networks.list(filters={"label": f"{LABEL}={_run_of(rec)}"}):
        with contextlib.suppress(docker.errors.NotFound):
            n.remove()
            gone.append(n.name)
    return f"network {', '.join(gone)}" if gone else None


def _undo_host_veth(rec: Mapping[str, Any]) -> str | None:
    name = str(rec["name"])
    if not Path(f"/sys/class/net/{name}").exists():
        return None  # it went with its namespace's peer
    p = subprocess.run(["ip", "link", "del", name], capture_output=True, text=True)
    if p.returncode != 0 and Path(f"/sys/class/net/{name}").exists():
        raise ClusterError(f"ip link del {name}: {p.stderr.strip()}")
    return f"veth {name}"


def undo_host_chain(rec: Mapping[str, Any]) -> str | None:
    """`remote-chain` (clusters/faults/partition.py): a chain on a node outside our namespaces. In a
    container it dies with the container; on an ssh host the ssh runtime removes it live; on
    this host (ssh client nodes share the controller's netns) it is removed here."""
    chain = str(rec["name"])
    if subprocess.run(["iptables", "-w", "-n", "-L", chain], capture_output=True).returncode:
        return None
    for args in (["-D", "INPUT", "-j", chain], ["-F", chain], ["-X", chain]):
        p = subprocess.run(["iptables", "-w", *args], capture_output=True, text=True)
        if p.returncode != 0 and args[0] != "-D":
            raise ClusterError(f"iptables {' '.join(args)}: {p.stderr.strip()}")
    return f"chain {chain} on this host"


register_undo("docker-container", _undo_containers)
register_undo("docker-network", _undo_network)
register_undo("docker-subnet", lambda rec: None)  # went with its network
register_undo("host-veth", _undo_host_veth)
register_undo("remote-chain", undo_host_chain)
