"""CPU of one start of each built JVM client program, with its class-data archive and without
(docs/test-suite-cpu.md; workloads/clients/jvm.py makes the archives).

    .venv/bin/python benchmarks/bench_jvm_start.py [--starts 5] [NAME ...]

A start is what every worker of every run pays before its first lock call: the JVM, the client
library's classes, its client object, then `close`. The endpoint refuses every connection
(127.0.0.1:1), so no server is needed and none is measured; a program that connects before it
reads its first request (Hazelcast's client retries a refused cluster for ever) is left out.
CPU is user+system of the JVM process and its threads (wait4's rusage), the median of
`--starts`; on a shared machine CPU seconds mean something, wall seconds do not.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

from fencecheck.workloads.clients import build as build_module

# Connects in main(), before the first request: no start without a server.
CONNECT_FIRST = {"hazelcast-java"}
ENV = {"PATH": "/usr/bin:/bin", "FENCECHECK_ENDPOINTS": "127.0.0.1:1", "FENCECHECK_WORKER": "0",
       "FENCECHECK_OPTIONS": '{"op_timeout_s": 0.5}'}


def start_cpu(argv: list[str]) -> float:
    """user+system seconds of one start to `close`."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=ENV)
    assert proc.stdin is not None
    proc.stdin.write(b'{"id": 0, "op": "close"}\n')
    proc.stdin.close()
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{argv[-1]}: exit {proc.returncode}")
    return ru.ru_utime + ru.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("names", nargs="*")
    args = parser.parse_args()
    names = args.names or [n for n, b in build_module.BUILDS.items()
                           if b.archive and n not in CONNECT_FIRST]
    print("| client | CPU s per start, no archive | with its archive | saved |")
    print("|---|---|---|---|")
    for name in names:
        argv = build_module.command(name)
        bare = [a for a in argv if not a.startswith("-XX:SharedArchiveFile=")]
        if bare == argv:
            print(f"| {name} | (no archive built) | | |")
            continue
        before = statistics.median(start_cpu(bare) for _ in range(args.starts))
        after = statistics.median(start_cpu(argv) for _ in range(args.starts))
        print(f"| {name} | {before:.2f} | {after:.2f} | {1 - after / before:.0%} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
