"""How a shipped JVM client program runs, and the class-data-sharing archive it starts with.

A short-lived client JVM spends most of its CPU loading, parsing and verifying its library's
classes (Redisson, Netty, Spring, Hazelcast: thousands of them), in every worker of every run.
So every JVM recipe of workloads/clients/build.py (Maven or javac) packs the program's classes
into `app.jar` (an archive takes jars, not folders), and once the build folder is in place a
training run dumps the classes the program loaded (`-XX:ArchiveClassesAtExit`) into
`<folder>-cds/app.jsa`, the way clusters/services/hazelcast_build.py does for the members; a
run maps it (`-XX:SharedArchiveFile`). docs/test-suite-cpu.md has the CPU per client before
and after.

The training is the program itself, generic to every stdio program: asked to take, renew and
release a lock on a service that refuses every connection (127.0.0.1:1), it loads what its
library needs to build a client, connect, fail and report it, then `close` ends it. A training
that cannot finish in `TRAINING_S` (Hazelcast's client retries a refused cluster for ever) is
stopped with SIGTERM: the JVM still writes the archive on its way out. The archive is then
checked by a JVM that must map it (`-Xshare:on ... -version`): JDK 17 maps a truncated or
corrupt archive and dies of SIGBUS even under the default -Xshare:auto, so one that fails the
check (a training killed mid-dump) is deleted. A training that leaves no usable archive leaves a
folder without one and the reason in its `training.log`, and the client runs as before. An
archive made against other jars or another JDK (an apt upgrade) is refused by the JVM, which
then runs without it, and a missing one is ignored (tests/workloads/test_client_build.py); the
JVM's own warnings go to stderr (the run's worker log), never to stdout, where only the
protocol's replies may be.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from pathlib import Path

log = logging.getLogger(__name__)

# Small, quick to start (C1 only: a client runs seconds, not hours), one GC thread; every JVM
# log line (warnings and errors only) to stderr.
JVM_FLAGS = ("-Xss512k", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "-Xlog:disable", "-Xlog:all=warning:stderr")
APP_JAR = "app.jar"
ARCHIVE = "app.jsa"
TRAINING_LOG = "training.log"
TRAINING_S = 10.0  # a client's classes are loaded in 1-2 s; Hazelcast's then retries for ever
CHECK_S = 120.0  # a JVM's dump or -version, however loaded the machine
_REFUSED = "127.0.0.1:1"  # nothing listens on port 1: every connection is refused at once
_REQUESTS = [
    {"id": 1, "op": "acquire", "lock": "fc-cds", "lease_ms": 1000, "timeout_ms": 500},
    {"id": 2, "op": "renew", "lock": "fc-cds", "token": 1, "lease_ms": 1000},
    {"id": 3, "op": "release", "lock": "fc-cds", "token": 1},
    {"id": 0, "op": "close"},
]


def pack(d: Path) -> list[str]:
    """The build step that packs the compiled classes into the folder's app.jar."""
    return ["jar", "--create", "--file", str(d / APP_JAR), "-C", str(d / "classes"), "."]


def classpath(d: Path, jars: str | None = None) -> str:
    """app.jar, then the given jars or else lib/'s jars in name order: spelled out, since an
    archive holds only for the class path it was dumped with (a `lib/*` wildcard's order is
    the directory's)."""
    rest = jars if jars is not None else ":".join(str(p) for p in sorted((d / "lib").glob("*.jar")))
    return f"{d / APP_JAR}:{rest}" if rest else str(d / APP_JAR)


def cds_dir(d: Path) -> Path:
    """Where the archive of the build in `d` goes: a folder beside it, made once `d` is final."""
    return d.with_name(d.name + "-cds")


def argv(d: Path, cp: str, main: str, args: tuple[str, ...] = ()) -> list[str]:
    """The command that runs the program built in `d`, with its archive where there is one."""
    archive = cds_dir(d) / ARCHIVE
    share = [f"-XX:SharedArchiveFile={archive}"] if archive.is_file() else []
    return ["java", *JVM_FLAGS, *share, "-cp", cp, main, *args]


def usable(command: list[str], archive: Path) -> bool:
    """Whether a JVM started as `command` (an argv of `argv`) maps `archive`: it must, under
    -Xshare:on, or it exits non-zero (a class path that differs, another JDK, a bad file)."""
    java, *rest = command
    rest = [a for a in rest if not a.startswith("-XX:SharedArchiveFile=")]
    cp = rest[rest.index("-cp"):rest.index("-cp") + 2]
    # A damaged archive crashes the JVM: its hs_err file goes beside the archive, no core dump.
    try:
        res = subprocess.run([java, "-Xshare:on", f"-XX:SharedArchiveFile={archive}",
                              *JVM_FLAGS, "-XX:-CreateCoredumpOnCrash", *cp, "-version"],
                             cwd=archive.parent, stdin=subprocess.DEVNULL, capture_output=True,
                             text=True, timeout=CHECK_S)
    except subprocess.TimeoutExpired:
        return False
    return res.returncode == 0


def train(command: list[str], into: Path, label: str = "") -> bool:
    """Run `command` (a JVM program's argv without an archive) on the training requests, its
    loaded classes dumped into `into`/app.jsa; its stderr in `into`/training.log. Whether a
    usable archive was written (False: the client runs without one)."""
    java, *rest = command
    archive = into / ARCHIVE
    dump = [java, f"-XX:ArchiveClassesAtExit={archive}", *rest]
    env = {**os.environ, "FENCECHECK_ENDPOINTS": _REFUSED, "FENCECHECK_WORKER": "0",
           "FENCECHECK_OPTIONS": json.dumps({"op_timeout_s": 0.5, "endpoints": _REFUSED})}
    t0 = time.monotonic()
    killed = False
    with (into / TRAINING_LOG).open("w") as err:
        proc = subprocess.Popen(dump, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=err, env=env, cwd=into, start_new_session=True)
        try:
            assert proc.stdin is not None
            try:
                proc.stdin.write("".join(json.dumps(r) + "\n" for r in _REQUESTS).encode())
                proc.stdin.close()
            except BrokenPipeError:
                pass  # it ended before reading: the archive says how far it got
            try:
                proc.wait(timeout=TRAINING_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGTERM)  # the JVM dumps on its way out
                proc.wait(timeout=CHECK_S)
        finally:
            if proc.poll() is None:
                killed = True  # mid-dump, maybe: the file is not trusted
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if archive.is_file() and (killed or not usable(command, archive)):
            err.write(f"fencecheck: {archive} is not usable (killed: {killed}): deleted\n")
            archive.unlink()
    made = archive.is_file()
    log.info("%s: class-data archive %s in %.1f s", label or into.name,
             f"of {archive.stat().st_size >> 20} MB" if made else
             f"not made (exit {proc.returncode}; {into / TRAINING_LOG})",
             time.monotonic() - t0)
    return made
