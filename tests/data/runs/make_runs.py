"""Writes the hand-made run directories under tests/data/runs/ (run once, outputs committed).

`fenced/`: etcd tokens over a fenced store, a paused client's late write rejected (valid).
`violations/`: a Redis lock over an unfenced resource; a client paused past its lease writes late
(stale-write-accepted, interleaved-writes, lost-update), and a second lock whose tokens go
backwards while two grants overlap (token-regression, double-grant). `planted/`: values that try to
break out of HTML, JSON-in-script and plotly labels. results.json is made by the checker, with a
hand-written linearizability counterexample added (that check runs separately).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from fencecheck.checker.verdict import check_history  # noqa: E402

Ev = tuple[float, Any, str, str, dict[str, Any] | None, str | None]


def op(t0: float, t1: float | None, p: Any, f: str, inv: dict[str, Any] | None,
       typ: str = "ok", done: dict[str, Any] | None = None, error: str | None = None) -> list[Ev]:
    out: list[Ev] = [(t0, p, "invoke", f, inv, None)]
    if t1 is not None:
        out.append((t1, p, typ, f, {**(inv or {}), **(done or {})}, error))
    return out


def write_history(path: Path, events: list[Ev]) -> None:
    events = sorted(events, key=lambda e: (e[0], e[2] == "invoke"))
    with path.open("w") as fh:
        for i, (t, p, typ, f, value, error) in enumerate(events):
            d: dict[str, Any] = {"index": i, "time": int(t * 1_000_000), "process": p,
                                 "type": typ, "f": f, "value": value}
            if error is not None:
                d["error"] = error
            fh.write(json.dumps(d) + "\n")


def run_dir(name: str, events: list[Ev], test: dict[str, Any], linear: bool) -> None:
    d = HERE / name
    (d / "nodes" / "n1").mkdir(parents=True, exist_ok=True)
    (d / "nodes" / "n2").mkdir(parents=True, exist_ok=True)
    (d / "nodes" / "n1" / "redis.log").write_text("1:M * Ready to accept connections tcp\n")
    (d / "nodes" / "n2" / "store.log").write_text("fenced store listening\n")
    (d / "fencecheck.log").write_text("INFO run started\nINFO run finished\n")
    write_history(d / "history.jsonl", events)
    (d / "test.json").write_text(json.dumps(test, indent=1) + "\n")
    results = check_history(d / "history.jsonl").to_json()
    if linear:
        results["valid"] = False
        results["checks"]["linearizable"] = {
            "valid": False,
            "model": "mutex",
            "violations": [{
                "kind": "not-linearizable", "lock": "L",
                "ops": [{"process": 1, "index": 24, "time_ns": 1_200_000_000, "token": None}],
                "explanation": "no order of the operations is a legal mutex history: process 1's "
                               "acquire at 1.200 s cannot be placed after the 14 operations "
                               "before it",
                "prefix": list(range(14)),
                "op": {"process": 1, "index": 24, "time_ns": 1_200_000_000, "f": "acquire"},
            }],
        }
    (d / "results.json").write_text(json.dumps(results, indent=1) + "\n")


def violations() -> list[Ev]:
    L = {"lock": "L", "lease_ms": 1000}
    ev: list[Ev] = []
    ev += op(10, 15, 0, "acquire", L, done={"token": 1})
    ev += op(20, 22, 0, "read", {"key": "k", "token": 1, "lock": "L"}, done={"value": 0})
    ev += op(25, 28, 0, "write", {"key": "k", "value": 1, "token": 1, "lock": "L"})
    ev += op(30, 33, 0, "release", {"lock": "L", "token": 1})
    ev += op(40, 45, 1, "acquire", L, done={"token": 2})
    ev += op(50, 52, 1, "read", {"key": "k", "token": 2, "lock": "L"}, done={"value": 1})
    ev += op(55, 58, 1, "write", {"key": "k", "value": 2, "token": 2, "lock": "L"})
    ev += op(60, 63, 1, "release", {"lock": "L", "token": 2})
    ev += op(100, 105, 0, "acquire", L, done={"token": 3})
    ev += op(110, 112, 0, "read", {"key": "k", "token": 3, "lock": "L"}, done={"value": 2})
    ev += op(115, 118, 0, "write", {"key": "k", "value": 3, "token": 3, "lock": "L"})
    ev += op(120, 121, "nemesis", "start-pause", {"nodes": ["c0"]})
    ev += op(1200, 1205, 1, "acquire", L, done={"token": 4})
    ev += op(1210, 1212, 1, "read", {"key": "k", "token": 4, "lock": "L"}, done={"value": 3})
    ev += op(1215, 1218, 1, "write", {"key": "k", "value": 4, "token": 4, "lock": "L"})
    ev += op(1220, 1223, 1, "release", {"lock": "L", "token": 4})
    ev += op(2400, 2401, "nemesis", "stop-pause", {"nodes": ["c0"]})
    ev += op(2500, 2503, 0, "write", {"key": "k", "value": 3, "token": 3, "lock": "L"})
    ev += op(2510, 2512, 0, "release", {"lock": "L", "token": 3}, "fail", error="not-owner")
    M = {"lock": "M", "lease_ms": 1000}
    ev += op(3000, 3001, "nemesis", "start-partition", {}, done={
        "shape": "one-node", "grudge": {"n1": ["c3", "n2"], "n2": ["n1"], "c3": ["n1"]}})
    ev += op(3100, 3105, 2, "acquire", M, done={"token": 7})
    ev += op(3110, 3113, 2, "release", {"lock": "M", "token": 7})
    ev += op(3200, 3205, 3, "acquire", M, done={"token": 5})
    ev += op(3300, 3305, 2, "acquire", M, done={"token": 8})
    ev += op(3400, 3403, 2, "release", {"lock": "M", "token": 8})
    ev += op(3500, 3503, 3, "release", {"lock": "M", "token": 5})
    ev += op(3600, 3605, 4, "acquire", L, done={"token": 9})
    ev += op(3610, 3613, 4, "write", {"key": "k", "value": 4, "token": 9, "lock": "L"})
    ev += op(3620, 3622, 4, "read", {"key": "k", "token": 9, "lock": "L"}, done={"value": 4})
    ev += op(3630, 3632, 4, "write", {"key": "j", "value": 1, "token": 1, "lock": "L"}, "fail",
             error="stale-token")
    ev += op(3640, 3700, 4, "release", {"lock": "L", "token": 9}, "info", error="timeout")
    ev += op(3700, 3701, "nemesis", "stop-partition", None, done={"healed": True})
    return ev


def fenced() -> list[Ev]:
    """etcd tokens over a fenced store: the paused client's late write is rejected."""
    L = {"lock": "L", "lease_ms": 500}
    ev: list[Ev] = []
    t = 0.0
    for p, tok in ((0, 101), (1, 102), (2, 103), (0, 104), (1, 105), (2, 106)):
        ev += op(t + 10, t + 14, p, "acquire", L, done={"token": tok})
        ev += op(t + 20, t + 23, p, "read", {"key": "k", "token": tok, "lock": "L"},
                 done={"value": tok - 101})
        ev += op(t + 30, t + 34, p, "write", {"key": "k", "value": tok - 100, "token": tok,
                                              "lock": "L"})
        ev += op(t + 40, t + 43, p, "release", {"lock": "L", "token": tok})
        t += 50
    ev += op(t + 10, t + 14, 0, "acquire", L, done={"token": 107})
    ev += op(t + 20, t + 23, 0, "read", {"key": "k", "token": 107, "lock": "L"}, done={"value": 6})
    ev += op(t + 25, t + 26, "nemesis", "start-pause", {"nodes": ["c0"]})
    ev += op(t + 600, t + 604, 1, "acquire", L, done={"token": 108})
    ev += op(t + 610, t + 613, 1, "read", {"key": "k", "token": 108, "lock": "L"},
             done={"value": 6})
    ev += op(t + 620, t + 624, 1, "write", {"key": "k", "value": 7, "token": 108, "lock": "L"})
    ev += op(t + 630, t + 633, 1, "release", {"lock": "L", "token": 108})
    ev += op(t + 900, t + 901, "nemesis", "stop-pause", {"nodes": ["c0"]})
    ev += op(t + 910, t + 913, 0, "write", {"key": "k", "value": 7, "token": 107, "lock": "L"},
             "fail", error="stale-token")
    ev += op(t + 920, t + 922, 0, "release", {"lock": "L", "token": 107}, "fail",
             error="lease-expired")
    ev += op(t + 950, t + 953, 2, "read", {"key": "k", "token": None, "lock": "L"},
             done={"value": 7})
    return ev


def planted() -> list[Ev]:
    bad_lock = "<script>window.fcPwned=1</script>"
    img = '"><img src=x onerror="window.fcPwned=2">'
    L = {"lock": bad_lock, "lease_ms": 1000}
    ev: list[Ev] = []
    ev += op(10, 15, 0, "acquire", L, done={"token": 1})
    ev += op(20, 22, 0, "read", {"key": img, "token": 1, "lock": bad_lock}, done={"value": 0})
    ev += op(25, 28, 0, "write", {"key": img, "value": 1, "token": 1, "lock": bad_lock})
    ev += op(30, 33, 0, "write", {"key": img, "value": "</script><!--<script>window.fcPwned=3"
                                  "</script>", "token": 1, "lock": bad_lock},
             "fail", error="<img src=x onerror=window.fcPwned=4>")
    ev += op(40, 45, 1, "acquire", L, done={"token": 1})
    ev += op(50, 53, 0, "release", {"lock": bad_lock, "token": 1})
    ev += op(60, 63, 1, "release", {"lock": bad_lock, "token": 1})
    ev += op(65, 68, 1, "read", {"key": img, "token": None, "lock": bad_lock}, done={"value": 0})
    ev += op(70, 71, "nemesis", "start-<b>x</b>", None)
    ev += op(80, 81, "nemesis", "stop-<b>x</b>", None)
    return ev


def main() -> None:
    run_dir("violations", violations(), {
        "run_id": "a1b2c3", "name": "redis-unfenced-pause", "started": "2026-11-29T23:00:00Z",
        "config": {"backend": "redis", "client": "redis-setnx", "resource": "fenced-store",
                   "nemesis": ["pause", "partition"], "fencing": False, "time_limit_s": 4,
                   "concurrency": 5, "lease_ms": 1000, "seed": 42, "runtime": "netns",
                   "nodes": ["n1", "n2"]},
        "versions": {"redis-server": "7.0.15", "fencecheck": "0.1.0"},
        "duration_s": 4.2, "exit_code": 1}, linear=True)
    run_dir("fenced", fenced(), {
        "run_id": "0f0f0f", "name": "etcd-fenced-pause", "started": "2026-11-29T22:50:00Z",
        "config": {"backend": "etcd", "client": "etcd", "resource": "fenced-store",
                   "nemesis": ["pause"], "fencing": True, "time_limit_s": 1.5,
                   "concurrency": 3, "lease_ms": 500, "seed": 7, "runtime": "netns",
                   "nodes": ["n1", "n2", "n3"]},
        "versions": {"etcd": "3.4.23", "fencecheck": "0.1.0"},
        "duration_s": 1.6, "exit_code": 0}, linear=False)
    run_dir("planted", planted(), {
        "run_id": "d4e5f6", "name": "<img src=x onerror=window.fcPwned=5>",
        "started": "2026-11-29T23:10:00Z",
        "config": {"backend": '"><svg onload=window.fcPwned=6>', "client": "x</script>y",
                   "resource": "fenced-store", "nemesis": ["<b>x</b>"], "fencing": False,
                   "seed": "<script>window.fcPwned=7</script>"},
        "versions": {"<i>v</i>": "</script><script>window.fcPwned=8</script>"},
        "duration_s": 0.1, "exit_code": 1}, linear=False)


if __name__ == "__main__":
    main()
