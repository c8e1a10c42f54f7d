"""The ssh runtime against real sshd servers, each in a network namespace of its own (own host
key, one authorized key, a known_hosts file written here), reachable from this host through a
veth into a private switch. `SshdHosts` is also used by tests/e2e/test_runtimes.py."""

from __future__ import annotations

import itertools
import logging
import os
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from fencecheck.clusters.base import ClusterError
from fencecheck.clusters.cleaner import NETNS_DIR, delete_netns, kill_pids
from fencecheck.clusters.runtimes.ssh import SshRuntime, log_destination
from fencecheck.clusters.runtimes.ssh_remote import SshRemote, packages_for, wanted_paths
from fencecheck.clusters.services.redis import RedisService
from tests.conftest import WORKER

pytestmark = pytest.mark.ssh

SSHD = "/usr/sbin/sshd"


def sshd_missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    if not os.path.exists(SSHD):
        return "needs sshd (apt-get install openssh-server)"
    return None


_INSTANCES = itertools.count()


class SshdHosts:
    """n sshd servers in namespaces `fcssh<tag>-h<i>` on a switch namespace `fcssh<tag>-sw`;
    this host reaches them through veth `fs<tag>h` (address .1). `close` kills every process in
    those namespaces (sshd and whatever it started) and deletes them."""

    def __init__(self, tmp: Path, n: int) -> None:
        self.tmp = tmp
        self.tag = secrets.token_hex(2)
        # The test process's machine-wide slot picks the third octet, and a count of this
        # process's instances the second (a module's sshd4 may be up beside a test's sshd2): a
        # random octet once put two switches on one /24, and a connection went to the other's.
        self.prefix = f"10.{213 + next(_INSTANCES) % 8}.{WORKER}"
        self.host_address = f"{self.prefix}.1"
        self.switch = f"fcssh{self.tag}-sw"
        self.names = [f"fcssh{self.tag}-h{i + 1}" for i in range(n)]
        self.addresses = [f"{self.prefix}.{i + 2}" for i in range(n)]
        self.key = tmp / "id_ed25519"
        self.known_hosts = tmp / "known_hosts"
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def namespaces(self) -> list[str]:
        return [self.switch, *self.names]

    def start(self) -> None:
        self.tmp.mkdir(parents=True, exist_ok=True)
        _keygen(self.key)
        (self.tmp / "authorized_keys").write_text(self.key.with_suffix(".pub").read_text())
        host_veth = f"fs{self.tag}h"
        batches: dict[str, list[str]] = {"": [f"netns add {ns}" for ns in self.namespaces]}
        batches[""] += [
            f"link add {host_veth} type veth peer name up0 netns {self.switch}",
            f"addr add {self.host_address}/24 dev {host_veth}",
            f"link set {host_veth} up",
        ]
        sw = batches[self.switch] = ["link add br0 type bridge", "link set br0 up",
                                     "link set up0 master br0", "link set up0 up"]
        for i, ns in enumerate(self.names):
            v = f"fs{self.tag}-{i + 1}"
            sw += [f"link add {v} type veth peer name eth0 netns {ns}",
                   f"link set {v} master br0", f"link set {v} up"]
            batches[ns] = ["link set lo up", f"addr add {self.addresses[i]}/24 dev eth0",
                           "link set eth0 up"]
        for ns, lines in batches.items():
            subprocess.run(["ip", *(["-n", ns] if ns else []), "-batch", "-"],
                           input="\n".join(lines) + "\n", text=True, check=True,
                           capture_output=True)
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory
        known = []
        empty = self.tmp / "bashrc"
        empty.write_text("")
        for i, ns in enumerate(self.names):
            hostkey = self.tmp / f"hostkey{i + 1}"
            _keygen(hostkey)
            known.append(f"{self.addresses[i]} {hostkey.with_suffix('.pub').read_text()}")
            conf = self.tmp / f"sshd{i + 1}.conf"
            conf.write_text(
                f"ListenAddress {self.addresses[i]}\nPort 22\nHostKey {hostkey}\n"
                f"AuthorizedKeysFile {self.tmp / 'authorized_keys'}\nPermitRootLogin yes\n"
                "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
                "StrictModes no\nPidFile none\nMaxSessions 64\nMaxStartups 64\n"
                "Subsystem sftp internal-sftp\n"
            )
            with open(self.tmp / f"sshd{i + 1}.log", "wb") as out:
                # A mount namespace of its own in which root's ~/.bashrc is empty: this
                # machine's runs pyenv init (0.5 s), which bash sources for every ssh command;
                # a remote host's root has no such thing.
                script = 'mount --bind "$1" /root/.bashrc; shift; exec "$@"'
                self.procs.append(subprocess.Popen(
                    ["ip", "netns", "exec", ns, "unshare", "-m", "--propagation", "private",
                     "sh", "-c", script, "sh", str(empty), SSHD, "-D", "-e", "-f", str(conf)],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True,
                ))
        self.known_hosts.write_text("".join(known))
        for addr in self.addresses:
            _wait_port(addr, 22, 10.0)

    def close(self) -> None:
        kill_pids([p.pid for p in self.procs if p.poll() is None])
        for p in self.procs:
            p.wait()
        delete_netns(self.namespaces)  # kills what sshd started, too

    def runtime(self, run_id: str, store: Path, **kwargs: object) -> SshRuntime:
        opts: dict[str, object] = {"user": "root", "key": self.key,
                                   "known_hosts": self.known_hosts}
        opts.update(kwargs)
        return SshRuntime(run_id, store, hosts=self.addresses, **opts)  # type: ignore[arg-type]


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


def _wait_port(host: str, port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def sshd_hosts(tmp: Path, n: int) -> Iterator[SshdHosts]:
    reason = sshd_missing()
    if reason:
        pytest.skip(reason)
    hosts = SshdHosts(tmp, n)
    try:
        hosts.start()
        yield hosts
    finally:
        hosts.close()
        assert not [ns for ns in hosts.namespaces if (NETNS_DIR / ns).exists()]


@pytest.fixture
def sshd2(tmp_path: Path) -> Iterator[SshdHosts]:
    yield from sshd_hosts(tmp_path / "sshd", 2)


@pytest.fixture
def run_id() -> str:
    return secrets.token_hex(3)


def test_commands_files_daemons_and_teardown(sshd2: SshdHosts, run_id: str,
                                             tmp_path: Path) -> None:
    store = tmp_path / "store"
    rt = sshd2.runtime(run_id, store)
    try:
        cluster = rt.setup(["n1", "n2"], ["c1"])
        n1, n2 = cluster.servers["n1"], cluster.servers["n2"]
        assert (n1.address, n2.address) == tuple(sshd2.addresses)
        assert cluster.clients["c1"].address == sshd2.host_address
        # argv is quoted, never re-split: a space and a quote stay one argument
        res = n1.run(["printf", "%s|", "a b", "c'd", "$HOME"])
        assert res.stdout == "a b|c'd|$HOME|"
        assert n1.run(["cat"], stdin=b"in\n").stdout == "in\n"
        assert n1.run(["sh", "-c", "exit 3"], check=False).returncode == 3
        with pytest.raises(ClusterError, match="exit 3"):
            n1.run(["sh", "-c", "echo oops >&2; exit 3"])
        with pytest.raises(ClusterError, match="timed out"):
            n1.run(["sleep", "5"], timeout_s=0.3)
        # in its own namespace: the host's address is not the node's
        ips = n1.run(["ip", "-o", "-4", "addr", "show", "eth0"]).stdout
        assert sshd2.addresses[0] in ips

        src = tmp_path / "src.txt"
        src.write_text("hello\n")
        target = store / "nodes" / "n2" / "sub" / "f.txt"
        n2.put_file(src, str(target))
        assert target.read_text() == "hello\n"
        n2.put_file(target, str(target))  # same file on a shared file system: not truncated
        assert target.read_text() == "hello\n"
        back = tmp_path / "back.txt"
        n2.get_file(str(target), back)
        assert back.read_text() == "hello\n"

        log = store / "nodes" / "n1" / "sleeper.log"
        d = n1.start_daemon("sleeper", ["sh", "-c", 'echo "up $FC_X"; exec sleep 60'],
                            log=log, env={"FC_X": "y z"})
        rt.ledger.record_process("n1", "sleeper", d.pid)
        assert n1.alive(d.pid)
        n1.signal(d.pid, signal.SIGSTOP)
        assert n1.run(["ps", "-o", "stat=", "-p", str(d.pid)]).stdout.startswith("T")
        n1.signal(d.pid, signal.SIGCONT)
        deadline = time.monotonic() + 5
        while "up y z" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        kinds = [r["kind"] for r in rt.ledger.records()]
        assert "remote-process" in kinds and "process" not in kinds
    finally:
        rt.teardown()
    assert not os.path.exists(f"/proc/{d.pid}") or _zombie(d.pid)
    rt.teardown()  # idempotent


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def test_unknown_host_key_is_refused_unless_opted_out(
    sshd2: SshdHosts, run_id: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    rt = sshd2.runtime(run_id, tmp_path / "store", known_hosts=empty)
    try:
        with pytest.raises(ClusterError) as e:
            rt.setup(["n1"], [])
        assert sshd2.addresses[0] in str(e.value)
        assert "--ssh-accept-unknown" in str(e.value)
    finally:
        rt.teardown()
    rt = sshd2.runtime(run_id, tmp_path / "store2", known_hosts=empty, accept_unknown=True)
    try:
        with caplog.at_level(logging.WARNING, logger="fencecheck.clusters.runtimes.ssh"):
            cluster = rt.setup(["n1"], [])
        assert cluster.servers["n1"].run(["true"]).returncode == 0
        assert any("UNVERIFIED" in r.message and sshd2.addresses[0] in r.message
                   for r in caplog.records)
    finally:
        rt.teardown()


def test_changed_host_key_is_refused_even_when_opted_out(
    sshd2: SshdHosts, run_id: str, tmp_path: Path
) -> None:
    wrong = tmp_path / "wrong_known_hosts"
    other = tmp_path / "other"
    _keygen(other)
    wrong.write_text(f"{sshd2.addresses[0]} {other.with_suffix('.pub').read_text()}")
    rt = sshd2.runtime(run_id, tmp_path / "store", known_hosts=wrong, accept_unknown=True)
    try:
        with pytest.raises(ClusterError, match="CHANGED"):
            rt.setup(["n1"], [])
    finally:
        rt.teardown()


def test_redis_runs_unchanged_on_an_ssh_host(sshd2: SshdHosts, run_id: str,
                                            tmp_path: Path) -> None:
    store = tmp_path / "store"
    rt = sshd2.runtime(run_id, store)
    service = RedisService(ledger=rt.ledger)
    try:
        cluster = rt.setup(["n1"], [])
        service.setup({"n1": cluster.servers["n1"]}, store)
        host, port = service.endpoints()[0].rsplit(":", 1)
        assert host == sshd2.addresses[0]
        r = redis.Redis(host=host, port=int(port), socket_timeout=2)
        assert r.set("k", "v") and r.get("k") == b"v"
        r.close()
        service.pause("n1")
        with pytest.raises(redis.exceptions.TimeoutError):
            redis.Redis(host=host, port=int(port), socket_timeout=0.3).get("k")
        service.resume("n1")
    finally:
        service.teardown()
        rt.teardown()
    assert (store / "nodes" / "n1" / "redis.log").stat().st_size > 0


def test_services_binaries_and_jars_map_to_packages() -> None:
    zk = ["/usr/bin/java", "-Xmx64m", "-cp", "/conf:/usr/share/java/zookeeper.jar:"
          "/usr/share/java/slf4j-simple.jar", "Main", "zoo.cfg"]
    assert wanted_paths(zk) == ["/usr/bin/java", "/usr/share/java/zookeeper.jar",
                                "/usr/share/java/slf4j-simple.jar"]
    assert wanted_paths(["redis-server", "/x/redis.conf"]) == ["redis-server"]
    assert wanted_paths(["/usr/bin/etcd", "--name=n1", "--listen-peer-urls=http://a:1"]) == [
        "/usr/bin/etcd"]
    assert packages_for(["/usr/bin/etcd", "redis-server", "/usr/bin/redis-server"]) == [
        "etcd-server", "etcd-client", "redis-server", "redis-tools"]


def test_services_found_on_a_host_are_used_as_found(sshd2: SshdHosts, run_id: str,
                                                    tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    rt = sshd2.runtime(run_id, tmp_path / "store")
    try:
        n1 = rt.setup(["n1"], []).servers["n1"]
        assert isinstance(n1, SshRemote)
        with caplog.at_level(logging.WARNING, logger="fencecheck.clusters.runtimes.ssh_remote"):
            n1.ensure(["/usr/bin/etcd", "redis-server", "/usr/share/java/zookeeper.jar"])
        assert not [r for r in caplog.records if "installing" in r.message]
        assert n1._present == {"/usr/bin/etcd", "redis-server", "/usr/share/java/zookeeper.jar"}
    finally:
        rt.teardown()


def test_sudo_prefixes_every_command_and_moves_files_through_it(sshd2: SshdHosts, run_id: str,
                                                                tmp_path: Path) -> None:
    if not os.path.exists("/usr/bin/sudo"):
        pytest.skip("needs sudo (apt-get install sudo)")
    store = tmp_path / "store"
    rt = sshd2.runtime(run_id, store, sudo=True)
    try:
        n1 = rt.setup(["n1"], []).servers["n1"]
        assert isinstance(n1, SshRemote)
        # the login shell sees SUDO_USER only when sudo ran the command
        assert n1.run(["sh", "-c", 'echo "$SUDO_USER"']).stdout.strip() == "root"
        src = tmp_path / "a.txt"
        src.write_text("via sudo\n")
        n1.put_file(src, str(store / "nodes" / "n1" / "a.txt"))
        assert (store / "nodes" / "n1" / "a.txt").read_text() == "via sudo\n"
        n1.get_file(str(store / "nodes" / "n1" / "a.txt"), tmp_path / "b.txt")
        assert (tmp_path / "b.txt").read_text() == "via sudo\n"
        assert n1._sftp is None  # no SFTP session was opened
        d = n1.start_daemon("s", ["sleep", "30"], log=store / "nodes" / "n1" / "s.log")
        rt.ledger.record_process("n1", "s", d.pid)
        assert n1.alive(d.pid)
    finally:
        rt.teardown()
    assert _zombie(d.pid) or not os.path.exists(f"/proc/{d.pid}")


@pytest.mark.parametrize("printed", [
    "{d}/../../x.log",  # the example: out of the store
    "{d}/../n2/redis.log",  # another node's folder
    "{d}/a/../../../etc/cron.d/x.log",
    "{d}/./redis.log",
    "{d}//redis.log",
    "{d}/a/b/c.log",  # deeper than find was asked to look
    "{d}/redis.conf",  # not a log
    "{d}-evil/redis.log",  # a sibling whose name starts like the node's
    "/etc/passwd",
    "{d}",
])
def test_a_log_path_outside_the_nodes_folder_is_refused(tmp_path: Path, printed: str) -> None:
    d = tmp_path / "run" / "nodes" / "n1"
    d.mkdir(parents=True)
    assert log_destination(d, printed.format(d=d)) is None


def test_a_log_path_through_a_symlink_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "run" / "nodes" / "n1"
    d.mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (d / "sub").symlink_to(tmp_path / "outside")
    assert log_destination(d, f"{d}/sub/redis.log") is None
    (d / "linked.log").symlink_to(tmp_path / "outside" / "x.log")
    assert log_destination(d, f"{d}/linked.log") is None


def test_a_log_in_the_nodes_folder_is_downloaded_to_the_same_place(tmp_path: Path) -> None:
    d = tmp_path / "run" / "nodes" / "n1"
    d.mkdir(parents=True)
    assert log_destination(d, f"{d}/redis.log") == d / "redis.log"
    assert log_destination(d, f"{d}/data/server.log") == d / "data" / "server.log"


@pytest.fixture
def sshd3(tmp_path: Path) -> Iterator[SshdHosts]:
    yield from sshd_hosts(tmp_path / "sshd", 3)


def _ping_from_ns(ns: str, host: str, port: str) -> str:
    p = subprocess.run(["ip", "netns", "exec", ns, "timeout", "3", "redis-cli", "-h", host,
                        "-p", port, "ping"], capture_output=True, text=True)
    return p.stdout.strip() or f"failed ({p.returncode})"


def test_redis_on_a_host_answers_only_the_tests_addresses(sshd3: SshdHosts, run_id: str,
                                                          tmp_path: Path) -> None:
    store = tmp_path / "store"
    # Two of the three hosts are the test's; the third stands for anyone else on the network.
    rt = SshRuntime(run_id, store, hosts=sshd3.addresses[:2], user="root", key=sshd3.key,
                    known_hosts=sshd3.known_hosts)
    service = RedisService(ledger=rt.ledger)
    outsider = sshd3.names[2]
    try:
        cluster = rt.setup(["n1", "n2"], ["c1"])
        service.setup({"n1": cluster.servers["n1"]}, store)
        host, port = service.endpoints()[0].rsplit(":", 1)
        r = redis.Redis(host=host, port=int(port), socket_timeout=2)  # the controller
        assert r.ping()
        r.close()
        n2 = cluster.servers["n2"]
        assert n2.run(["redis-cli", "-h", host, "-p", port, "ping"]).stdout.strip() == "PONG"
        assert _ping_from_ns(outsider, host, port) != "PONG"
        # ssh itself, and everything but the services' ports, is untouched
        socket.create_connection((sshd3.addresses[0], 22), timeout=2).close()
    finally:
        service.teardown()
        rt.teardown()
    rules = subprocess.run(["ip", "netns", "exec", sshd3.names[0], "iptables", "-S"],
                           capture_output=True, text=True).stdout
    assert f"FCG-{run_id}" not in rules  # teardown removed the guard


def test_the_resource_node_runs_on_the_controller(sshd2: SshdHosts, run_id: str,
                                                  tmp_path: Path) -> None:
    store = tmp_path / "store"
    # One host is enough for one server: the resource needs none (no copy of the project there).
    rt = SshRuntime(run_id, store, hosts=sshd2.addresses[:1], user="root", key=sshd2.key,
                    known_hosts=sshd2.known_hosts, local_nodes=("r1",))
    try:
        cluster = rt.setup(["n1", "r1"], ["c1"])
        r1 = cluster.servers["r1"]
        assert not isinstance(r1, SshRemote)
        assert r1.address == cluster.clients["c1"].address == sshd2.host_address
        d = r1.start_daemon("sleeper", ["sleep", "60"], log=store / "nodes" / "r1" / "s.log")
        rt.ledger.record_process("r1", "sleeper", d.pid)
        assert os.path.exists(f"/proc/{d.pid}")  # a process of this host
        records = [r for r in rt.ledger.records() if r.get("name") == "sleeper"]
        assert [r["kind"] for r in records] == ["process"]  # the local cleaner can kill it
    finally:
        rt.teardown()
    assert not os.path.exists(f"/proc/{d.pid}") or _zombie(d.pid)
