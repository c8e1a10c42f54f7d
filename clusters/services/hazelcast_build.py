"""The Hazelcast member jar of the `hazelcast` backends: `com.hazelcast:hazelcast` at the pinned
release `PIN`, copied from Maven Central into the build cache once per machine.

Why 5.4.0, not the newest (5.7.0 on Maven Central): from 5.5.0 the CP Subsystem is an
Enterprise-only feature (the 5.5.0 release notes' first breaking change). In the community jar
of 5.5.0 and later (5.5.0 and 5.7.0 run here) a member configured with CP members refuses to
start, and without them its stub `CPSubsystem.getLock` throws `UnsupportedOperationException: CP
subsystem is a licensed feature`, so its "unsafe mode" is gone too (the Java client has the same
stub); docs/findings/hazelcast.md has what was run to see it.
5.4.0 is the newest release whose community jar runs both, and the last 5.4 on Maven Central.

`fencecheck build hazelcast` (or `python -m fencecheck.clusters.services.hazelcast_build`)
copies the jar into `$FENCECHECK_CLIENT_CACHE` (default /var/cache/fencecheck/clients)/
hazelcast-<PIN>/ with Maven's dependency plugin (the pinned one
the JVM clients' builds use), which checks it against Maven Central's checksum, with a tiny
`training.jar` beside it; then into hazelcast-<PIN>-cds/ a class-data-sharing archive of the
classes a member loads while it starts (`hazelcast.jsa`, dumped by starting one member alone
with the two jars from their final place, which the archive names). Members that see the cache
start with it: 1.1-1.3 s of CPU against 2.0-2.3 s without (docs/findings/hazelcast.md). An
unchanged pin is a no-op. `jar()` is the jar's path, or `NotBuilt` naming the command that
builds it (the backends' preflight turns that into exit 3 before a run starts).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from fencecheck.clusters.base import ClusterError
from fencecheck.toolchain import cache

GROUP, ARTIFACT = "com.hazelcast", "hazelcast"
PIN = "5.4.0"
NAME = "hazelcast"
BUILD_HINT = "fencecheck build hazelcast"
TOOLCHAIN = "maven"  # fencecheck.toolchain.tools
COPY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy"
JAR = f"{ARTIFACT}-{PIN}.jar"
CDS = "hazelcast.jsa"
TRAINING_JAR = "training.jar"
# The member's start class, as Hazelcast's own start script runs it; its config is a file
# named by -Dhazelcast.config.
MAIN = "com.hazelcast.core.server.HazelcastMemberStarter"
# A member's JVM: small, quick to start (C1 only; it runs seconds, not hours), few GC threads.
JVM_FLAGS = ("-Xms64m", "-Xmx256m", "-Xss512k", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "-Xshare:auto")

# A member started alone to record which classes a start loads (for the CDS archive), then shut
# down by the exit of its JVM: a config file of its own, on loopback only, joining nobody.
_TRAINING_YAML = """hazelcast:
  cluster-name: fc-cds-training
  network:
    port: {port: 5799, auto-increment: false}
    interfaces: {enabled: true, interfaces: [127.0.0.1]}
    join:
      auto-detection: {enabled: false}
      multicast: {enabled: false}
      tcp-ip: {enabled: true, member-list: [127.0.0.1:5799]}
  properties:
    hazelcast.phone.home.enabled: false
    hazelcast.wait.seconds.before.join: 0
    hazelcast.socket.bind.any: false
"""

# Starts the member, waits until it is up, and exits the JVM (which writes the archive).
_TRAINING_MAIN = """import com.hazelcast.core.Hazelcast;
public final class Training {
    public static void main(String[] args) {
        Hazelcast.newHazelcastInstance().getCPSubsystem().getLock("fc-cds");
        System.exit(0);
    }
}
"""


class NotBuilt(ClusterError):
    """The member jar is not in the cache."""


def label() -> str:
    """The name and pinned release, as `fencecheck build` and test.json show it."""
    return f"{NAME} {PIN}"


def source() -> str:
    """What the build is made from, for `fencecheck build --dry-run`."""
    return f"{GROUP}:{ARTIFACT}:{PIN} (Maven Central), and its class-data-sharing archive"


def build_dir() -> Path:
    return cache.cache_root() / f"{NAME}-{PIN}"


def cds_dir() -> Path:
    return cache.cache_root() / f"{NAME}-{PIN}-cds"


def binary() -> Path:
    """What `fencecheck build` checks for: the member jar (see `jar`)."""
    return jar()


def steps(folder: Path) -> list[list[str]]:
    """Both builds' commands, as `fencecheck build --dry-run` shows them: the jar into `folder`,
    then the archive into its own folder."""
    return [*_jar_steps(folder), *_cds_steps(cds_dir())]


def jar() -> Path:
    """The member jar; NotBuilt (with the command that builds it) if there is none."""
    d = build_dir()
    if not cache.is_built(d):
        raise NotBuilt(f"hazelcast {PIN} is not built (looked in {d}); build it with: "
                       f"{BUILD_HINT}")
    return d / JAR


def cds_archive() -> tuple[Path, Path] | None:
    """The class-data-sharing archive made against `jar()` where it is, and the jar that must
    follow it on the class path (the archive was dumped with it there), if built."""
    d = cds_dir()
    return (d / CDS, build_dir() / TRAINING_JAR) if cache.is_built(d) else None


def _fill_jar(folder: Path) -> None:
    (folder / "Training.java").write_text(_TRAINING_MAIN)


def _jar_steps(folder: Path) -> list[list[str]]:
    return [
        ["mvn", "-B", "-q", COPY_PLUGIN, f"-Dartifact={GROUP}:{ARTIFACT}:{PIN}",
         f"-DoutputDirectory={folder}"],
        ["javac", "-cp", str(folder / JAR), "-d", str(folder / "training"),
         str(folder / "Training.java")],
        ["jar", "cf", str(folder / TRAINING_JAR), "-C", str(folder / "training"), "."],
    ]


def _fill_cds(folder: Path) -> None:
    (folder / "training.yaml").write_text(_TRAINING_YAML)


def _cds_steps(folder: Path) -> list[list[str]]:
    # The archive names the class path's jars by path (and size and time), and a member's class
    # path must start with the same ones (and no directories: CDS refuses them): it is dumped
    # against the jars in their final place.
    d = build_dir()
    return [["java", *JVM_FLAGS, f"-XX:ArchiveClassesAtExit={folder / CDS}",
             f"-Dhazelcast.config={folder / 'training.yaml'}",
             "-cp", f"{d / JAR}:{d / TRAINING_JAR}", "Training"]]


def build() -> tuple[Path, bool]:
    """Build unless the cache has it. Returns (jar, whether it built)."""
    built = cache.run(build_dir(), NAME, _fill_jar, _jar_steps, ClusterError)
    built |= cache.run(cds_dir(), f"{NAME}-cds", _fill_cds, _cds_steps, ClusterError)
    return jar(), built


def main(argv: Sequence[str] | None = None) -> int:
    return cache.build_main("python -m fencecheck.clusters.services.hazelcast_build", __doc__,
                            label(), build, (ClusterError,), argv)


if __name__ == "__main__":
    sys.exit(main())
