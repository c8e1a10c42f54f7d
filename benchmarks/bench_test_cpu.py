"""Where the test suite's CPU goes, per test, per test file, per xdist group and per command
(docs/test-suite-cpu.md). Run as root:

    .venv/bin/python benchmarks/bench_test_cpu.py run --out DIR -- tests/e2e -n 2 --dist loadgroup
    .venv/bin/python benchmarks/bench_test_cpu.py analyze DIR [DIR ...] [--top 40]

`run` turns BSD process accounting on into DIR/pacct (`accton`, Debian's `acct` package) for
the length of one pytest session with the `tests.cpu_meter` plugin (each xdist worker and what
it starts in a cpuacct cgroup of its own: CPU per test), turns it off, and prints the tables;
`analyze` prints them again from one or more such folders (a suite measured in parts).

The accounting file names a process by a 15-character command ("python", "java"): its records
are matched by pid and start time to the plugin's samples of the cgroups' processes, which have
the command line, and a process never sampled (it lived under half a second) is named by its
command and counted to its parent's test. Records of processes outside the cgroups (other
users of the machine) are left out. Accounting is one switch per machine (per pid namespace):
`run` refuses to start when another file is being written to.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import struct
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
AHZ = 100  # acct v3 times are in 1/100 s
ACCT_V3 = struct.Struct("<BBHIIIIIIfHHHHHHHH16s")  # struct acct_v3, linux/acct.h


def comp_t(c: int) -> int:
    """A comp_t (13-bit mantissa, 3-bit base-8 exponent) as an integer."""
    return (c & 0x1FFF) << (3 * (c >> 13))


@dataclass
class Proc:
    pid: int
    ppid: int
    start: float  # epoch seconds (whole seconds in acct records)
    end: float
    cpu_s: float
    comm: str
    cmd: str = ""
    worker: str = ""  # the xdist worker whose cgroup it ran in, "" = not ours
    children: list[Proc] = field(default_factory=list)


def read_acct(path: Path) -> list[Proc]:
    data = path.read_bytes()
    out = []
    for off in range(0, len(data) - ACCT_V3.size + 1, ACCT_V3.size):
        f = ACCT_V3.unpack_from(data, off)
        if f[1] != 3:
            continue
        pid, ppid, btime, etime = f[6], f[7], f[8], f[9]
        cpu = (comp_t(f[10]) + comp_t(f[11])) / AHZ
        comm = f[18].split(b"\0", 1)[0].decode(errors="replace")
        out.append(Proc(pid, ppid, float(btime), btime + etime / AHZ, cpu, comm))
    return out


def _boot_time() -> float:
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    raise RuntimeError("no btime in /proc/stat")


def _jsonl(folders: list[Path], pattern: str) -> list[dict[str, Any]]:
    return [json.loads(line) for d in folders for p in sorted(d.glob(pattern))
            for line in p.read_text().splitlines() if line.strip()]


def attribute(folders: list[Path]) -> list[Proc]:
    """The accounting records of processes that ran in the measured cgroups, named."""
    boot, tick = _boot_time(), os.sysconf("SC_CLK_TCK")
    sampled: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for s in _jsonl(folders, "procs-*.jsonl"):
        s["epoch"] = boot + s["start"] / tick
        sampled[s["pid"]].append(s)
    procs = sorted((p for d in folders if (d / "pacct").exists() for p in read_acct(d / "pacct")),
                   key=lambda p: p.start)
    alive: dict[int, list[Proc]] = defaultdict(list)
    for p in procs:
        match = [s for s in sampled.get(p.pid, ()) if abs(s["epoch"] - p.start) <= 1.5]
        if match:
            p.cmd, p.worker = match[0]["cmd"], match[0]["worker"]
        else:
            parent = next((q for q in reversed(alive.get(p.ppid, ()))
                           if q.start - 1 <= p.start <= q.end + 1), None)
            if parent is not None and parent.worker:
                p.worker = parent.worker
                parent.children.append(p)
        alive[p.pid].append(p)
    return [p for p in procs if p.worker]


_JAVA_MAINS = {"-Dzookeeper.jmx": "zookeeper server",  # QuorumPeerMain
               "com.hazelcast.core.server.HazelcastMemberStarter": "hazelcast member"}
_PY_MODULES = [("fencecheck.workloads.loops.worker", "run worker"),
               ("fencecheck.workloads.resources.store", "fenced store"),
               ("fencecheck.fleet.runs", "matrix row"),
               ("fencecheck.clusters.faults.proxy", "delay proxy"),
               ("fencecheck.clusters.faults.unsynced_fs", "lose-unsynced FUSE"),
               ("import sys;exec(eval(sys.stdin.readline()))", "pytest worker (test code)"),
               ("-m pytest", "pytest (test code)")]


def role(p: Proc) -> str:
    """What a process was, for the table: its command, and for python and java what ran."""
    cmd, comm = p.cmd, p.comm
    if comm.startswith("python") or "python" in cmd.split(" ", 1)[0]:
        for needle, name in _PY_MODULES:
            if needle in cmd:
                return f"python: {name}"
        m = re.search(r"-m fencecheck (\S+)", cmd) or re.search(r"bin/fencecheck (\S+)", cmd)
        if m:
            return f"python: fencecheck {m.group(1)}"
        if " -c " in cmd:
            return "python: -c (probes, helpers)"
        return "python: other" if cmd else "python: short-lived (<0.5 s)"
    if comm == "java" or cmd.startswith("java") or "/java " in cmd:
        for main, name in _JAVA_MAINS.items():
            if main in cmd:
                return f"java: {name}"
        m = re.search(r"/([a-z][a-z0-9-]*)-[0-9a-f]{16}/app.jar", cmd)  # a shipped client's build
        if m and "-XX:ArchiveClassesAtExit" not in cmd:
            return f"java: client {m.group(1)}"
        if "-XX:ArchiveClassesAtExit" in cmd:
            return "java: CDS training"
        if "plexus-classworlds" in cmd or "maven" in cmd:
            return "java: maven"
        args = [a for a in cmd.split() if not a.startswith("-") and "/" not in a and ":" not in a]
        return f"java: client {args[-1] if len(args) > 1 else '?'}" if cmd else "java: short-lived"
    return comm


def _test_index(tests: list[dict[str, Any]]) -> dict[str, tuple[list[float], list[str]]]:
    by_worker: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for t in tests:
        by_worker[t["worker"]].append((t["start"], t["test"]))
    return {w: ([s for s, _ in sorted(v)], [n for _, n in sorted(v)])
            for w, v in by_worker.items()}


def test_of(index: dict[str, tuple[list[float], list[str]]], worker: str, t: float) -> str:
    starts, names = index.get(worker, ([], []))
    i = bisect.bisect_right(starts, t + 1) - 1
    return names[i] if i >= 0 else "(before the first test)"


def _table(head: list[str], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        return f"{v:,.1f}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def report(folders: list[Path], top: int) -> str:
    lines = _jsonl(folders, "tests-*.jsonl")
    tests = [t for t in lines if "test" in t]
    sessions = [t for t in lines if "session" in t]
    procs = attribute(folders)
    total_cpu = sum(t.get("cpu_s", t["self_s"]) for t in tests)
    session_cpu = sum(t.get("cpu_s", t["self_s"]) for t in sessions)
    out = [f"{len(tests)} tests; CPU in the tests' cgroups {total_cpu:,.0f} s (the sessions' "
           f"{session_cpu:,.0f} s: {session_cpu - total_cpu:,.0f} s outside tests, collection "
           f"included); wall (summed over tests) {sum(t['wall_s'] for t in tests):,.0f} s; "
           f"accounted processes {len(procs):,}, their CPU {sum(p.cpu_s for p in procs):,.0f} s"]

    groups: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    files: dict[str, list[Any]] = defaultdict(lambda: [0, 0.0, 0.0, ""])
    for t in tests:
        cpu = t.get("cpu_s", t["self_s"])
        for acc in (groups[t["group"] or "(none: spread)"], files[_file(t["test"])]):
            acc[0] += 1
            acc[1] += cpu
            acc[2] += t["wall_s"]
        files[_file(t["test"])][3] = t["group"]
    out += ["\n### By xdist group\n", _table(
        ["group", "tests", "CPU s", "wall s (in series)"],
        [[g, int(n), c, w] for g, (n, c, w) in sorted(groups.items(), key=lambda kv: -kv[1][1])])]
    out += ["\n### By test file\n", _table(
        ["file", "group", "tests", "CPU s", "wall s", "CPU s per test"],
        [[f, g or "", n, c, w, c / n] for f, (n, c, w, g) in
         sorted(files.items(), key=lambda kv: -kv[1][1])[:top]])]
    out += [f"\n### The {top} tests that burn the most CPU\n", _table(
        ["test", "CPU s", "wall s"],
        [[t["test"], t.get("cpu_s", t["self_s"]), t["wall_s"]] for t in
         sorted(tests, key=lambda t: -t.get("cpu_s", t["self_s"]))[:top]])]

    roles: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    index = _test_index(tests)
    by_file_role: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for p in procs:
        r = role(p)
        roles[r][0] += 1
        roles[r][1] += p.cpu_s
        by_file_role[_file(test_of(index, p.worker, p.start))][r] += p.cpu_s
    out += ["\n### By command (BSD process accounting)\n", _table(
        ["command", "processes", "CPU s", "CPU s per process"],
        [[r, int(n), c, c / n] for r, (n, c) in sorted(roles.items(), key=lambda kv: -kv[1][1])
         if c >= 0.5])]
    out += ["\n### Per test file, its three biggest commands\n", _table(
        ["file", "commands (CPU s)"],
        [[f, "; ".join(f"{r} {c:,.1f}" for r, c in sorted(rs.items(), key=lambda kv: -kv[1])[:3])]
         for f, rs in sorted(by_file_role.items(), key=lambda kv: -sum(kv[1].values()))[:top]])]
    return "\n".join(out) + "\n"


def _accounting_busy() -> Path | None:
    """The default accounting file, if it grows (someone's accounting is on)."""
    default = Path("/var/log/account/pacct")
    if not default.exists():
        return None
    size = default.stat().st_size
    time.sleep(2)
    return default if default.stat().st_size != size else None


def run(out: Path, pytest_args: list[str], acct: bool) -> int:
    out.mkdir(parents=True, exist_ok=True)
    pacct = out / "pacct"
    env = {**os.environ, "FC_TEST_CPU": str(out), "FC_TEST_CPU_TAG": f"{os.getpid()}"}
    if acct:
        busy = _accounting_busy()
        if busy is not None:
            print(f"bench_test_cpu: process accounting is on into {busy}; not touching it",
                  file=sys.stderr)
            return 3
        pacct.touch()
        subprocess.run(["accton", str(pacct)], check=True)
    t0 = time.monotonic()
    try:
        rc = subprocess.call([sys.executable, "-m", "pytest", "-p", "tests.cpu_meter",
                              *pytest_args], cwd=REPO, env=env)
    finally:
        if acct:
            subprocess.run(["accton", "off"], check=True)
    print(f"pytest exit {rc} in {time.monotonic() - t0:,.0f} s", file=sys.stderr)
    return rc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="measure one pytest session")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--no-acct", action="store_true", help="per test only (no accounting)")
    r.add_argument("--top", type=int, default=40)
    r.add_argument("pytest_args", nargs=argparse.REMAINDER)
    a = sub.add_parser("analyze", help="the tables again, from measured folders")
    a.add_argument("folders", nargs="+", type=Path)
    a.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    if args.cmd == "run":
        rest = args.pytest_args
        rest = rest[1:] if rest[:1] == ["--"] else rest
        rc = run(args.out, rest, not args.no_acct)
        folders = [args.out]
    else:
        rc, folders = 0, args.folders
    text = report(folders, args.top)
    print(text)
    if args.cmd == "run":
        (args.out / "summary.md").write_text(text)
    return rc


if __name__ == "__main__":
    sys.exit(main())
