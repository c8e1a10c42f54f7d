"""The descriptor types: a backend (its lock service and facts), a lock client, a resource, a
fault, and what a machine needs for them. Pure data: factories are "module:Class" strings,
imported only when a run uses them."""

from __future__ import annotations

from dataclasses import dataclass, field

# Capabilities a lock service may declare; a fault requires some of them. A service that
# declares one implements the matching protocol of fencecheck.clusters.base (Pausable,
# Killable, ...): the declaration is what the up-front check reads, the protocol what the fault
# calls.
PAUSE = "pause"  # Pausable: SIGSTOP/SIGCONT one server
KILL = "kill"  # Killable: SIGKILL one server and restart it on its data
CLOCK = "clock"  # its servers' clocks can be moved by the LD_PRELOAD shim (takes env_for)
FAILOVER = "failover"  # FailsOver: a primary that replicas take over from
# DataDirs and Killable: its durable state lives in a data directory that can be placed on the
# lose-unsynced file system, and it fsyncs what it means to keep
UNSYNCED = "lose-unsynced"

RUNTIMES: tuple[str, ...] = ("netns", "docker", "ssh")


class CatalogError(ValueError):
    """A plugin's entry point does not load or is not the descriptor its group expects."""


@dataclass(frozen=True, slots=True)
class Need:
    """Something a machine needs for a backend: a binary on PATH or a file, and the Debian
    package that provides it (what `fencecheck doctor` checks and scripts/setup.sh installs)."""

    what: str
    binary: str | None = None
    path: str | None = None
    package: str = ""


@dataclass(frozen=True, slots=True)
class Program:
    """A client program shipped in workloads/clients/<source>/, built by scripts/build-clients.sh
    (workloads/clients/build.py turns this into its build steps, cached by source hash).
    `build`: its toolchain, "go", "maven", "npm" or "javac" (against Debian's jars); `entry`:
    its binary (go), main class (java) or script (npm); `args`: what follows on its command
    line; `shared`: library folders it uses beyond its language's stdio library; `pins`: the
    dependency whose pinned version the comparison names, as (its name in the program's go.mod,
    pom.xml or package.json, the label shown)."""

    source: str
    build: str
    entry: str
    args: tuple[str, ...] = ()
    shared: tuple[str, ...] = ()
    pins: tuple[str, str] | None = None


@dataclass(frozen=True, slots=True)
class ServerBuild:
    """A server binary fencecheck builds itself, at a pinned release, where no package ships
    one: `name` is what `bash scripts/build-clients.sh NAME` builds, `module` the builder it runs
    (`python -m MODULE`: build unless cached; `--version` prints the pin)."""

    name: str
    module: str


@dataclass(frozen=True, slots=True)
class ClientDescriptor:
    """A lock client a worker can build: `spec` is its "module:Class", constructed with one
    argument, the options mapping. `token` says what its grants' token means (None: no token).
    `settings_check`: a "module:function" called with (client options, lease_ms) before a run
    creates anything; a WorkloadError it raises (settings its library refuses) is exit 3.
    `program`: the program a shipped client runs (declared here once: its build, its class and
    its row in the comparison all come from this)."""

    name: str
    spec: str
    token: str | None = "a fencing token"
    workloads: frozenset[str] = frozenset({"lock", "leader", "cron"})
    settings_check: str | None = None
    # What its workers add to the backend's weight (a JVM per worker: 1; see BackendDescriptor).
    weight: int = 0
    # The comparison's words for it (docs/comparison.md, recorded in test.json's versions), and
    # the Python distribution whose installed version they name, if any.
    library: str = ""
    dist: str | None = None
    # A shipped program (its `spec` is then the generic ShippedClient, which runs its build).
    program: Program | None = None


@dataclass(frozen=True, slots=True)
class BackendDescriptor:
    """Everything about one lock backend.

    `service` is the "module:Class" of its LockService, built with the keyword arguments named
    in `service_args` (a subset of "persistence", "env_for", "ledger", "lease_ms"): declared,
    never guessed.
    `clients`: the clients that drive it, the default first. `capabilities`: what faults may
    rely on (PAUSE, KILL, CLOCK, FAILOVER, UNSYNCED). `clock_refusal`: why CLOCK is missing,
    shown when a clock fault is refused. `version_argv`: prints the server's version on its
    first line.
    `preflight`: a "module:function" called before a run creates anything; a ClusterError it
    raises (a server binary that is not built, with the command that builds it) is exit 3.
    `server_build`: the server binary built here (scripts/build-clients.sh and `doctor` read it).
    `weight`: a run's share of the machine (1 = a redis-server run), for parallel matrices."""

    name: str
    summary: str
    service: str
    clients: tuple[ClientDescriptor, ...]
    token: str
    nodes: int
    capabilities: frozenset[str] = frozenset()
    service_args: frozenset[str] = frozenset()
    runtimes: frozenset[str] = frozenset(RUNTIMES)
    max_nodes: int = 9
    needs: tuple[Need, ...] = ()
    version_argv: tuple[str, ...] = ()
    python_libs: tuple[str, ...] = ()
    clock_refusal: str | None = None
    preflight: str | None = None
    server_build: ServerBuild | None = None
    # How much of the machine a run takes, in units of one redis-server run: what
    # `fencecheck matrix --jobs` adds up so the heavy runs (three JVM or kube-apiserver members)
    # do not start together.
    weight: int = 1

    @property
    def default_client(self) -> str:
        return self.clients[0].name

    @property
    def client_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.clients)

    @property
    def apt(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p for n in self.needs for p in n.package.split() if p))


@dataclass(frozen=True, slots=True)
class ResourceDescriptor:
    """What a lock protects. `spec`: the worker-side Resource "module:Class"; `starter`: the
    controller-side "module:function" that starts its server and returns the options its
    clients get (see fencecheck.run.resources). `backends`/`workloads`: None means any."""

    name: str
    spec: str
    starter: str
    summary: str = ""
    backends: frozenset[str] | None = None
    workloads: frozenset[str] | None = None
    needs: tuple[Need, ...] = ()


@dataclass(frozen=True, slots=True)
class FaultDescriptor:
    """A fault: `factory` is the "module:Class" of its Fault (fencecheck.nemesis.faults.base), built
    with a FaultContext. `requires`: service capabilities it needs; `runtimes`: where it works;
    `waits_for_grant`: with --pause-target holder the schedule starts it only once a fresh grant
    is seen (so it lands inside a critical section). `ends_on_successor`: a start aimed at that
    fresh holder ends shortly after another worker is granted its lock and has written
    (fencecheck/nemesis/successor.py), the drawn hold being the upper bound; not with
    --fault-duration
    (a hold the user fixed) nor at replay (the recorded hold). `worker_env`: its Fault is a
    WorkerEnv (the workers start with the environment it gives, e.g. the clock shim)."""

    name: str
    factory: str
    summary: str = ""
    requires: frozenset[str] = frozenset()
    runtimes: frozenset[str] = frozenset(RUNTIMES)
    waits_for_grant: bool = True
    needs: tuple[Need, ...] = field(default=())
    ends_on_successor: bool = False
    worker_env: bool = False
