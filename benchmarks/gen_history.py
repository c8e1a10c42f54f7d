"""Synthetic lock histories: a correct lock service simulated in virtual time, and planted faults.

`simulate(cfg, rng)` runs worker processes against a correct lease-based lock service (tokens
grow with every grant, a lease lapses lease_ms after it took effect) and a key-value resource that
is fenced or not. Workers take a lock, read and increment the lock's counter k times (renewing the
lease as they go), release; some pause past their lease (logged as nemesis ops), some operations
end `info` and retire their process id. Each operation takes effect at one instant between its
invoke and its completion. With a fenced resource the history is correct, so the checker must
find nothing in it; unfenced, paused clients cause real violations.

`plant(events, kind, rng)` adds one fault of a given violation kind, touching nothing the other
checks look at (the property tests rely on that).

Run as a script to write the benchmark pair (a clean history and a twin with one planted double
grant and one lost update):
    .venv/bin/python benchmarks/gen_history.py /tmp/fc-bench --events 1000000 --seed 1
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import logging
import random
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fencecheck.checker.base import Event
from fencecheck.checker.grants import build_grants
from fencecheck.checker.history import pair

log = logging.getLogger(__name__)

MS = 1_000_000
Json = dict[str, Any]
# a worker program yields ("op", f, value), ("delay", ns) or ("pause", ns) and gets back
# (completion type, completion value) for ops
Step = tuple[str, Any, Any]
Program = Generator[Step, tuple[str, Any], None]


@dataclass(frozen=True, slots=True)
class SimConfig:
    processes: int = 5
    locks: int = 1
    lease_ms: int | None = 200  # None: locks that never expire
    writes_per_section: int = 2
    fenced: bool = True
    p_pause: float = 0.05  # chance a worker pauses between its read and its write
    p_info: float = 0.02  # chance an operation's outcome is unknown (then it may take effect)
    events: int = 200  # stop invoking new operations once this many events exist
    cut: bool = False  # stop dead at `events`, leaving operations in flight (no final read)
    acquire_timeout_ms: int = 0  # > 0: an acquire waits this long for a held lock, else fails
    p_slow: float = 0.0  # chance a step of work takes about half a lease (so leases get renewed)


class _Sim:
    def __init__(self, cfg: SimConfig, rng: random.Random) -> None:
        self.cfg = cfg
        self.rng = rng
        self.now = 0
        self.events: list[Json] = []
        self.heap: list[tuple[int, int, int, str]] = []
        self.seq = 0
        self.next_pid = cfg.processes
        self.lease_ns = None if cfg.lease_ms is None else cfg.lease_ms * MS
        self.lock_names = [f"lock-{i}" for i in range(cfg.locks)]
        self.last_token = dict.fromkeys(self.lock_names, 0)
        self.holder: dict[str, tuple[int, float]] = {}  # lock -> (token, expiry ns)
        self.seen: dict[str, int] = {}
        self.store: dict[str, int] = {}
        # per worker slot: pid, program, current op (f, value, info?), pending result
        self.pid: list[int] = list(range(cfg.processes))
        self.prog: list[Program] = [self._program(w) for w in range(cfg.processes)]
        self.cur: list[tuple[str, Json, bool] | None] = [None] * cfg.processes
        self.result: list[tuple[str, Any, str | None]] = [("ok", None, None)] * cfg.processes
        self.reply: list[tuple[str, Any] | None] = [None] * cfg.processes
        self.invoked_at = [0] * cfg.processes
        self.complete_at: list[int | None] = [None] * cfg.processes  # others are stale

    def emit(self, p: int | str, type_: str, f: str, value: Json | None,
             error: str | None = None) -> None:
        e: Json = {"index": len(self.events), "time": self.now, "process": p, "type": type_,
                   "f": f, "value": value}
        if error is not None:
            e["error"] = error
        self.events.append(e)

    def at(self, t: int, w: int, phase: str) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, w, phase))

    def _program(self, w: int) -> Program:
        rng, cfg = self.rng, self.cfg
        while True:
            yield ("delay", rng.randint(0, 3 * MS), None)
            lock = rng.choice(self.lock_names)
            key = "counter-" + lock
            typ, got = yield ("op", "acquire", {"lock": lock, "lease_ms": cfg.lease_ms})
            if typ != "ok":
                yield ("delay", rng.randint(1 * MS, 20 * MS), None)  # back off, as clients do
                continue
            token = got["token"]
            renewed = self.now
            held = True
            for _ in range(cfg.writes_per_section):
                if self.lease_ns is not None and self.now - renewed > self.lease_ns // 3:
                    renewed = self.now
                    typ, _got = yield ("op", "renew",
                                       {"lock": lock, "token": token, "lease_ms": cfg.lease_ms})
                    if typ != "ok":
                        held = False
                        break
                typ, got = yield ("op", "read", {"key": key, "token": token, "lock": lock})
                if typ != "ok":
                    break
                if rng.random() < cfg.p_pause:
                    yield ("pause", rng.randint(1, 3) * (self.lease_ns or 100 * MS), None)
                yield ("delay", rng.randint(0, 2 * MS), None)
                if cfg.p_slow and self.lease_ns is not None and rng.random() < cfg.p_slow:
                    yield ("delay", rng.randint(self.lease_ns // 4, self.lease_ns // 2), None)
                typ, _got = yield ("op", "write", {"key": key, "value": got["value"] + 1,
                                                   "token": token, "lock": lock})
                if typ != "ok":
                    break
            if held:
                yield ("op", "release", {"lock": lock, "token": token})

    def effect(self, f: str, v: Json) -> tuple[str, Any, str | None]:
        """Apply one operation to the service or resource at `now`."""
        lock = v.get("lock", "")
        if f in ("acquire", "renew", "release"):
            held = self.holder.get(lock)
            live = held is not None and self.now < held[1]
            expiry = float("inf") if self.lease_ns is None else self.now + self.lease_ns
            if f == "acquire":
                if live:
                    return ("fail", None, "held")
                self.last_token[lock] += 1
                self.holder[lock] = (self.last_token[lock], expiry)
                return ("ok", {"token": self.last_token[lock]}, None)
            if not live or held is None or held[0] != v["token"]:
                return ("fail", None, "not-held")
            if f == "renew":
                self.holder[lock] = (held[0], expiry)
            else:
                del self.holder[lock]
            return ("ok", None, None)
        key, token = v["key"], v.get("token")
        if self.cfg.fenced and token is not None:
            if token < self.seen.get(key, 0):
                return ("fail", None, "stale-token")
            self.seen[key] = token
        if f == "read":
            return ("ok", {"value": self.store.get(key, 0)}, None)
        self.store[key] = v["value"]
        return ("ok", None, None)

    def step(self, w: int, phase: str) -> None:
        rng = self.rng
        if phase == "effect":
            cur = self.cur[w]
            assert cur is not None
            f, v, info = cur
            if not info or rng.random() < 0.5:
                self.result[w] = self.effect(f, v)
                timeout = self.cfg.acquire_timeout_ms * MS
                if f == "acquire" and self.result[w][2] == "held" and timeout:
                    # a blocking acquire: wait (poll) for the lock until the timeout
                    retry = self.now + rng.randint(200_000, 2 * MS)
                    if retry < self.invoked_at[w] + timeout:
                        self.at(retry, w, "effect")
                        self.complete_at[w] = None
                        return
                    self.result[w] = ("fail", None, "timeout")
                if self.complete_at[w] is None:
                    self.complete_at[w] = self.now + rng.randint(50_000, 2 * MS)
                    self.at(self.complete_at[w], w, "complete")  # type: ignore[arg-type]
            return
        if phase == "complete":
            if self.now != self.complete_at[w]:
                return  # superseded: the acquire went on waiting
            self.complete_at[w] = None
            cur = self.cur[w]
            assert cur is not None
            f, v, info = cur
            typ, val, err = self.result[w]
            if info:
                self.emit(self.pid[w], "info", f, None, "timeout")
                # the worker goes on under a new id, from the top of its program
                self.pid[w] = self.next_pid
                self.next_pid += 1
                self.prog[w] = self._program(w)
                self.reply[w] = None
            else:
                self.emit(self.pid[w], typ, f, val, err)
                self.reply[w] = (typ, val)
            self.cur[w] = None
            self.at(self.now, w, "invoke")
            return
        if phase == "unpause":
            self.emit("nemesis", "invoke", "stop-pause", {"process": self.pid[w]})
            self.emit("nemesis", "ok", "stop-pause", None)
            self.at(self.now, w, "invoke")
            return
        if len(self.events) >= self.cfg.events:
            return  # winding down: no new operations
        prog = self.prog[w]
        reply = self.reply[w]
        step = next(prog) if reply is None else prog.send(reply)
        self.reply[w] = None
        kind, a, b = step
        if kind == "delay":
            self.at(self.now + a, w, "invoke")
        elif kind == "pause":
            self.emit("nemesis", "invoke", "start-pause", {"process": self.pid[w]})
            self.emit("nemesis", "ok", "start-pause", None)
            self.at(self.now + a, w, "unpause")
        else:
            self.emit(self.pid[w], "invoke", a, b)
            self.cur[w] = (a, b, rng.random() < self.cfg.p_info)
            self.result[w] = ("fail", None, "no-effect")
            self.invoked_at[w] = self.now
            t_effect = self.now + rng.randint(50_000, 2 * MS)
            self.at(t_effect, w, "effect")
            self.complete_at[w] = t_effect + rng.randint(50_000, 2 * MS)
            self.at(self.complete_at[w], w, "complete")  # type: ignore[arg-type]

    def run(self) -> list[Json]:
        for w in range(self.cfg.processes):
            self.at(0, w, "invoke")
        while self.heap:
            t, _, w, phase = heapq.heappop(self.heap)
            if self.cfg.cut and len(self.events) >= self.cfg.events:
                return self.events
            self.now = t
            self.step(w, phase)
        final = self.next_pid
        for lock in self.lock_names:
            key = "counter-" + lock
            self.emit(final, "invoke", "read", {"key": key, "token": None, "lock": lock})
            self.now += 100_000
            self.emit(final, "ok", "read", {"value": self.store.get(key, 0)})
        return self.events


def simulate(cfg: SimConfig, rng: random.Random) -> list[Json]:
    """A history (event dicts in index order) of a correct lock service; see the module doc."""
    return _Sim(cfg, rng).run()


# ---- planted faults: each adds exactly one violation kind and disturbs no other check ----

PLANTABLE = ("double-grant", "token-regression", "stale-write-accepted", "interleaved-writes",
             "lost-update")


def _ops(events: list[Json]) -> list[Any]:
    return pair(Event(e["index"], e["time"], e["process"], e["type"], e["f"], e.get("value"),
                      e.get("error")) for e in events)


def _insert(events: list[Json], new: list[Json]) -> list[Json]:
    """Merge new events (in their own order) by time after existing ones of equal time."""
    merged = sorted(events + new, key=lambda e: e["time"])  # stable: new ones go last at a tie
    for i, e in enumerate(merged):
        e["index"] = i
    return merged


def _new_pid(events: list[Json]) -> int:
    return 1 + max((e["process"] for e in events if type(e["process"]) is int), default=-1)


def _ev(t: int, p: int, type_: str, f: str, value: Json | None) -> Json:
    return {"index": -1, "time": t, "process": p, "type": type_, "f": f, "value": value}


def _bump_last_read(events: list[Json], key: str) -> None:
    """Raise the final read of key by one, so that an extra accepted write is not a lost update."""
    ops = _ops(events)
    reads = [o for o in ops if o.f == "read" and o.ok and o.get("key") == key
             and type(o.get("value")) is int]
    if reads:
        ev = events[reads[-1].end_index]
        ev["value"] = {**(ev["value"] or {}), "value": reads[-1].get("value") + 1}


def plant(events: list[Json], kind: str, rng: random.Random) -> list[Json] | None:
    """A copy of a correct history with one fault of `kind`; None if it has no place for one."""
    events = [dict(e) for e in events]
    ops = _ops(events)
    pid = _new_pid(events)
    if kind in ("double-grant", "token-regression"):
        grants = [g for g in build_grants(ops).grants
                  if g.end - g.start >= 4 and (kind == "double-grant" or g.token is not None)]
        if not grants:
            return None
        g = rng.choice(grants)
        lock, lease = g.lock, g.acquire.get("lease_ms")
        if kind == "double-grant":
            # a second holder without a token (so fencing has nothing to say about it)
            end = min(g.end, g.start + 10 * MS)
            t = rng.randint(g.start, int(end) - 3)
            new = [_ev(t, pid, "invoke", "acquire", {"lock": lock, "lease_ms": lease}),
                   _ev(t + 1, pid, "ok", "acquire", {"token": None}),
                   _ev(t + 2, pid, "invoke", "release", {"lock": lock, "token": None}),
                   _ev(t + 2, pid, "ok", "release", None)]
        else:
            # an old token handed out again, held for no time at all (so no double grant)
            t = g.start + 1
            new = [_ev(t, pid, "invoke", "acquire", {"lock": lock, "lease_ms": lease}),
                   _ev(t, pid, "ok", "acquire", {"token": g.token}),
                   _ev(t, pid, "invoke", "release", {"lock": lock, "token": g.token}),
                   _ev(t, pid, "ok", "release", None)]
        return _insert(events, new)
    writes = [o for o in ops if o.f == "write" and o.ok and type(o.get("token")) is int]
    if kind == "stale-write-accepted":
        if not writes:
            return None
        w1 = max(writes, key=lambda o: o.end_time)
        key, t = w1.get("key"), w1.end_time + 1
        new = [_ev(t, pid, "invoke", "write", {"key": key, "value": w1.get("value"),
                                               "token": w1.get("token") - 1,
                                               "lock": w1.get("lock")}),
               _ev(t + 1, pid, "ok", "write", None)]
        out = _insert(events, new)
        _bump_last_read(out, key)
        return out
    if kind == "interleaved-writes":
        table = build_grants(ops)
        by_grant: dict[tuple[int, Any], list[Any]] = {}
        for o in writes:
            gid = table.write_grant.get(o.index)
            if gid is not None:
                by_grant.setdefault((gid, o.get("key")), []).append(o)
        gaps = [(a1, a2) for ws in by_grant.values() for a1, a2 in itertools.pairwise(ws)
                if a2.time - a1.end_time >= 3]
        if not gaps:
            return None
        a1, a2 = rng.choice(gaps)
        key = a1.get("key")
        new = [_ev(a1.end_time + 1, pid, "invoke", "write",
                   {"key": key, "value": a1.get("value"), "token": a1.get("token"),
                    "lock": a1.get("lock")}),
               _ev(a2.time - 1, pid, "ok", "write", None)]
        out = _insert(events, new)
        _bump_last_read(out, key)
        return out
    if kind == "lost-update":
        last: dict[Any, Any] = {}
        for o in ops:
            if o.f == "read" and o.ok and type(o.get("value")) is int:
                last[o.get("key")] = o
        cands = []
        for key, r in last.items():
            before = sum(1 for w in ops if w.f == "write" and w.ok and w.get("key") == key
                         and w.end_time < r.time)
            if before >= 1:
                cands.append((r, before))
        if not cands:
            return None
        r, before = rng.choice(cands)
        events[r.end_index]["value"] = {**(events[r.end_index]["value"] or {}),
                                        "value": before - 1}
        return events
    raise ValueError(f"cannot plant {kind!r}; one of {', '.join(PLANTABLE)}")


def write_jsonl(path: Path, events: list[Json]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for e in events:
            fh.write(json.dumps(e, separators=(",", ":")))
            fh.write("\n")


EXAMPLES = {
    # a client paused past its 50 ms lease writes with its old token; nothing fences it
    "redis-unfenced": (SimConfig(processes=3, lease_ms=50, p_pause=0.3, p_info=0.0,
                                 fenced=False, events=50), 28),
    # the same kind of pause against a fenced resource: the late write is rejected
    "etcd-fenced": (SimConfig(processes=3, lease_ms=100, p_pause=0.25, p_info=0.0,
                              fenced=True, events=40), 8),
}


def write_examples(out: Path) -> None:
    """The small histories under examples/histories/ (fixed seeds: the same files every time)."""
    out.mkdir(parents=True, exist_ok=True)
    for name, (cfg, seed) in EXAMPLES.items():
        write_jsonl(out / f"{name}.jsonl", simulate(cfg, random.Random(seed)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="directory for clean.jsonl and planted.jsonl")
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--processes", type=int, default=20)
    ap.add_argument("--locks", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--examples", action="store_true",
                    help="write the small example histories to OUT instead")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.examples:
        write_examples(args.out)
        return
    rng = random.Random(args.seed)
    cfg = SimConfig(processes=args.processes, locks=args.locks, lease_ms=500,
                    writes_per_section=3, p_pause=0.01, p_info=0.002, events=args.events,
                    acquire_timeout_ms=1000, p_slow=0.05)
    events = simulate(cfg, rng)
    args.out.mkdir(parents=True, exist_ok=True)
    write_jsonl(args.out / "clean.jsonl", events)
    planted = plant(events, "double-grant", rng)
    assert planted is not None
    planted = plant(planted, "lost-update", rng)
    assert planted is not None
    write_jsonl(args.out / "planted.jsonl", planted)
    log.info("wrote %d events to %s, and a twin with one double grant and one lost update",
             len(events), args.out)


if __name__ == "__main__":
    main()
