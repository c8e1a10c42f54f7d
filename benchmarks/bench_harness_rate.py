"""How fast the harness itself goes: N real worker processes against a local redis-server and
the fenced store on 127.0.0.1, no think or idle time, no faults. Reports operations per second
and latency percentiles per operation kind, so a run's rates can be read against the harness's
ceiling (the tester must not be the bottleneck).

Run: `.venv/bin/python benchmarks/bench_harness_rate.py --workers 4 --seconds 5 [--client
redis-py] [--out result.json]`. The summary goes to the log (stderr) and, with --out, to a file.
The pieces (`start_redis`, `start_store`, `run_workers`, `summarize`) are importable.

`--compare-bare --rounds N` alternates N harness runs with N runs of each bare loop on the same
servers and compares the medians: on a shared machine whose load moves within seconds, one run
of each back to back can differ by the load alone. Two bare loops, neither recording anything:
`BARE_LOOP` (SET NX PX, INCR, owner-checked DEL: 3 round trips, the issue's yardstick) and
`BARE_STORE_LOOP`, the harness cycle's own work (the same token-granting SET NX PX script, a
read and a write on the same fenced store through the same client, owner-checked DEL: 4 round
trips), so what is left between it and the harness is the worker and its 8 recorded events.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fencecheck.workloads.eventlog import read_log  # noqa: E402
from fencecheck.workloads.loops.worker import WorkerConfig  # noqa: E402

log = logging.getLogger("bench_harness_rate")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
            proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def _serving(argv: Sequence[str], port: int) -> Iterator[str]:
    proc = subprocess.Popen(list(argv), cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{argv[0]} did not start") from None
                time.sleep(0.02)
        yield f"127.0.0.1:{port}"
    finally:
        _stop(proc)


@contextlib.contextmanager
def start_redis(workdir: Path) -> Iterator[str]:
    port = free_port()
    with _serving(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "no", "--dir", str(workdir)], port) as address:
        yield address


@contextlib.contextmanager
def start_store(workdir: Path, fencing: bool) -> Iterator[str]:
    port = free_port()
    with _serving([sys.executable, "-m", "fencecheck.workloads.resources.store",
                   "--host", "127.0.0.1", "--port",
                   str(port), "--fencing", "on" if fencing else "off", "--log",
                   str(workdir / "store.log")], port) as address:
        yield address


# The bare loops: one program, its setup and one lock cycle's work filled in (nothing recorded).
_BARE = """
import random, sys, time, uuid
import redis
host, port = sys.argv[1].rsplit(":", 1)
locks, seconds, seed = int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
r = redis.Redis(host=host, port=int(port))
{setup}
rng = random.Random(seed)
cycles = 0
end = time.monotonic() + seconds
while time.monotonic() < end:
    lock = "bare:%d" % rng.randrange(locks)
    me = uuid.uuid4().hex
{cycle}
    release(keys=[lock], args=[me])
    cycles += 1
print(cycles)
"""

# SET NX PX, INCR, owner-checked DEL: 3 round trips on the one redis-server.
BARE_LOOP = _BARE.format(
    setup="""
release = r.register_script(
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0")
""",
    cycle="""
    while not r.set(lock, me, nx=True, px=5000):
        time.sleep(0.005)
    r.incr(lock + ":counter")
""")

# The harness cycle's own work: redis-setnx's token script, a read and a write on the same
# fenced store through the same StoreResource, the owner-checked release.
BARE_STORE_LOOP = _BARE.format(
    setup="""
from fencecheck.workloads.clients.redis import ACQUIRE_LUA, RELEASE_LUA
from fencecheck.workloads.resources.store import StoreResource
acquire, release = r.register_script(ACQUIRE_LUA), r.register_script(RELEASE_LUA)
store = StoreResource({"address": sys.argv[5], "op_timeout_s": 2.0})
""",
    cycle="""
    while (token := acquire(keys=[lock, lock + ":token"], args=[me, 5000])) is None:
        time.sleep(0.005)
    store.write(lock, (store.read(lock, token, lock) or 0) + 1, token, lock)
""")


def run_bare(redis_address: str, *, workers: int, seconds: float, locks: int,
             store_address: str | None = None) -> float:
    """Lock cycles per second of a bare redis-py loop in `workers` processes (the same poll
    interval as the redis-setnx client): `BARE_LOOP`, or with `store_address`
    `BARE_STORE_LOOP` against that fenced store."""
    loop, extra = (BARE_LOOP, []) if store_address is None else (BARE_STORE_LOOP, [store_address])
    procs = [subprocess.Popen([sys.executable, "-c", loop, redis_address, str(locks),
                               str(seconds), str(i), *extra], stdout=subprocess.PIPE, cwd=REPO)
             for i in range(workers)]
    total = 0
    for p in procs:
        out, _ = p.communicate(timeout=seconds + 30)
        total += int(out.strip() or 0)
    return total / seconds


def run_workers(workdir: Path, redis_address: str, store_address: str, *, workers: int,
                seconds: float, client: str, locks: int,
                writes_per_section: int = 3) -> list[dict[str, Any]]:
    """Run `workers` worker processes for `seconds`; returns all their events by time."""
    t0 = time.monotonic_ns()
    procs: list[subprocess.Popen[bytes]] = []
    configs = []
    try:
        for i in range(workers):
            cfg = WorkerConfig(
                worker=i, concurrency=workers, process_base=0, client=client,
                client_options={"endpoints": [redis_address]}, resource="store",
                resource_options={"address": store_address},
                locks=[f"k{j}" for j in range(locks)], lease_ms=5000, acquire_timeout_s=2.0,
                think_ms=0, writes_per_section=writes_per_section, idle_ms=0, renew=False,
                log=str(workdir / f"w{i}.jsonl"), t0_ns=t0, seed=i, op_timeout_s=2.0)
            cfg.dump(workdir / f"w{i}.json")
            configs.append(cfg)
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "fencecheck.workloads.loops.worker",
                    str(workdir / f"w{i}.json")],
                cwd=REPO, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        # Measure from when every worker runs: a worker's imports take seconds on a loaded
        # machine, and the bare loop, too, counts only from after its own.
        deadline = time.monotonic() + 60
        while (time.monotonic() < deadline and all(p.poll() is None for p in procs)
               and not all(Path(c.log).exists() and Path(c.log).stat().st_size for c in configs)):
            time.sleep(0.05)
        time.sleep(seconds)
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(timeout=10)
    finally:
        for p in procs:
            _stop(p)
    events = [e for c in configs for e in read_log(c.log)]
    return sorted(events, key=lambda e: e["time"])


def steady_cycles_per_s(events: list[dict[str, Any]], workers: int) -> float:
    """Granted acquires per second while all `workers` ran: from the last worker's first event
    to the first worker's last (a process id is base + worker + workers * generation)."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for e in events:
        w = int(e["process"]) % workers
        first.setdefault(w, e["time"])
        last[w] = e["time"]
    if len(first) < workers:
        return 0.0
    lo, hi = max(first.values()), min(last.values())
    n = sum(1 for e in events
            if e["f"] == "acquire" and e["type"] == "ok" and lo <= e["time"] <= hi)
    return n / ((hi - lo) / 1e9) if hi > lo else 0.0


def summarize(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Completed ops per second and latency percentiles (ms) per `f`."""
    if not events:
        return {"ops": 0}
    span_s = (events[-1]["time"] - events[0]["time"]) / 1e9 or 1.0
    started: dict[Any, int] = {}
    lat: dict[str, list[float]] = {}
    for e in events:
        if e["type"] == "invoke":
            started[e["process"]] = e["time"]
        elif e["process"] in started:
            lat.setdefault(e["f"], []).append((e["time"] - started.pop(e["process"])) / 1e6)
    out: dict[str, Any] = {"ops": sum(len(v) for v in lat.values()), "seconds": span_s}
    out["ops_per_s"] = out["ops"] / span_s
    for f, xs in sorted(lat.items()):
        xs.sort()
        out[f] = {"n": len(xs), "p50_ms": xs[len(xs) // 2], "p99_ms": xs[int(len(xs) * 0.99)],
                  "max_ms": xs[-1]}
    return out


def compare(harness_rates: list[float], bare_rates: list[float]) -> dict[str, Any]:
    """The medians of alternating harness and bare runs, their ratio, and the median of each
    round's ratio (a harness run against the bare run right after it, under the same load)."""
    harness, bare = statistics.median(harness_rates), statistics.median(bare_rates)
    paired = [h / b for h, b in zip(harness_rates, bare_rates, strict=True) if b]
    return {"harness": harness, "bare": bare, "ratio": harness / bare if bare else None,
            "paired_ratio_median": statistics.median(paired) if paired else None,
            "rounds": {"harness": harness_rates, "bare": bare_rates}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--client", default="redis-setnx")
    parser.add_argument("--locks", type=int, default=4)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--compare-bare", action="store_true",
                        help="also run the bare redis-py loops (BARE_LOOP, and BARE_STORE_LOOP "
                             "with the fenced store) against the same servers and compare "
                             "lock cycles per second")
    parser.add_argument("--rounds", type=int, default=1,
                        help="with --compare-bare: alternate this many harness and bare runs "
                             "and compare their medians")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with tempfile.TemporaryDirectory(prefix="fc-bench-") as tmp:
        workdir = Path(tmp)
        fencing = args.client == "redis-setnx"
        harness_rates: list[float] = []
        bare_rates: list[float] = []
        bare_store_rates: list[float] = []
        with start_redis(workdir) as r, start_store(workdir, fencing) as s:
            for i in range(max(1, args.rounds) if args.compare_bare else 1):
                run_dir = workdir / f"round{i}"
                run_dir.mkdir()
                events = run_workers(run_dir, r, s, workers=args.workers, seconds=args.seconds,
                                     client=args.client, locks=args.locks,
                                     writes_per_section=1 if args.compare_bare else 3)
                summary = summarize(events)
                # One harness cycle: acquire, read, write (one increment), release, each an
                # event; one bare cycle: SET NX PX, INCR, owner-checked DEL, nothing recorded.
                harness_rates.append(steady_cycles_per_s(events, args.workers))
                if args.compare_bare:
                    bare_rates.append(run_bare(r, workers=args.workers, seconds=args.seconds,
                                               locks=args.locks))
                    if fencing:  # the store loop's tokens come from redis-setnx's script
                        bare_store_rates.append(run_bare(
                            r, workers=args.workers, seconds=args.seconds, locks=args.locks,
                            store_address=s))
    result = {"workers": args.workers, "client": args.client, **summary}
    if bare_rates:
        result["lock_cycles_per_s"] = compare(harness_rates, bare_rates)
    if bare_store_rates:
        result["lock_cycles_per_s_same_work"] = compare(harness_rates, bare_store_rates)
    log.info("%s", json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
