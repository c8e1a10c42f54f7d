"""Benchmark of the model checker (`fencecheck check --model`) beside Porcupine, same histories.

Histories, generated with fixed seeds by benchmarks/bench_linear.py's generators:
- cas-register: 1,000 ops from 50 processes whose operations all overlap (seed 1), and the same
  with one planted read, by a fresh process between two ops in the middle, of a value nobody wrote;
- mutex: 200,000 ops from 10 processes (seed 1), and the same with one planted double grant.

Each history is written as history.jsonl and checked in a fresh process by each tool, with the
same time limit: fencecheck loads it with the strict reader and runs `check_linearizable`;
Porcupine (benchmarks/porcupine, Go, its own module) reads the same ops, encoded by fencecheck's
own model (`Model.encode`: failed ops and indeterminate reads left out, indeterminate ops
optional), and checks them with the same model written for Porcupine. The table gives each
tool's verdict, the seconds of the check alone (the reading excluded), and the peak RSS of its
whole process. Each process runs under an address-space cap (--max-mem-gb); one that exceeds it
is reported "out of memory".

Build Porcupine's side first (needs Go and the Go module proxy; not built by the test command):
    (cd benchmarks/porcupine && go build -o porcupine-bench .)
    .venv/bin/python benchmarks/bench_model.py [--time-limit 60] [--only cas|mutex] [--max-mem-gb 8]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_linear import cas_history, mutex_history
from fencecheck.checker.base import Op

log = logging.getLogger("bench_model")

HERE = Path(__file__).resolve().parent
PORCUPINE = HERE / "porcupine" / "porcupine-bench"
NEVER_WRITTEN = 99  # cas_history writes 0..4


def to_events(ops: list[Op]) -> list[dict[str, Any]]:
    """The history.jsonl lines of ops numbered as bench_linear numbers them (event order)."""
    events: list[dict[str, Any]] = []
    for op in ops:
        events.append({"index": op.index, "time": op.time, "process": op.process,
                       "type": "invoke", "f": op.f, "value": op.value})
        if op.end_index is not None:
            events.append({"index": op.end_index, "time": op.end_time, "process": op.process,
                           "type": op.type, "f": op.f, "value": None})
    events.sort(key=lambda e: e["index"])
    return events


def plant_read(events: list[dict[str, Any]], key: str = "register") -> list[dict[str, Any]]:
    """A read of a value nobody wrote, by a fresh process, between two events in the middle."""
    mid = len(events) // 2
    t = events[mid]["time"]
    fresh = 1 + max(e["process"] for e in events)
    read = [{"index": 0, "time": t, "process": fresh, "type": "invoke", "f": "read",
             "value": {"key": key, "value": None}},
            {"index": 0, "time": t, "process": fresh, "type": "ok", "f": "read",
             "value": {"value": NEVER_WRITTEN}}]
    out = events[:mid + 1] + read + events[mid + 1:]
    for i, e in enumerate(out):
        e["index"] = i
    return out


def write_history(path: Path, events: list[dict[str, Any]]) -> None:
    with open(path, "w") as fh:
        for e in events:
            fh.write(json.dumps(e, separators=(",", ":")) + "\n")


def export_for_porcupine(history: Path, model: str, out: Path) -> int:
    """The ops as Porcupine's side reads them, encoded by fencecheck's own model."""
    from fencecheck.checker.history import load_ops
    from fencecheck.checker.linear.models import ACQUIRE, CAS, HOLD, MODELS, READ, RELEASE, WRITE

    kinds = {ACQUIRE: "acquire", RELEASE: "release", HOLD: "hold", READ: "read", WRITE: "write",
             CAS: "cas"}
    spec = MODELS[model]
    rows = []
    for op in load_ops(history):
        encoded = spec.encode(op)
        if encoded is None:
            continue
        call, optional = encoded
        optional = optional or op.end_index is None
        args = list(call[1:]) if call[0] in (READ, WRITE, CAS) else []
        if any(a is not None and type(a) is not int for a in args):
            raise SystemExit(f"{history}: Porcupine's side takes int values only, not {args}")
        rows.append({"client": op.process, "call": op.index,
                     "ret": -1 if optional else op.end_index, "kind": kinds[call[0]],
                     "part": spec.partition(op), "a": args[0] if args else None,
                     "b": args[1] if len(args) > 1 else None, "optional": optional})
    out.write_text(json.dumps(rows))
    return len(rows)


def _ours_child(history: Path, model: str, limit_s: float) -> None:
    from fencecheck.checker.history import load_ops
    from fencecheck.checker.linear import check_linearizable

    ops = load_ops(history)
    t0 = time.perf_counter()
    res = check_linearizable(ops, model, limit_s)
    seconds = time.perf_counter() - t0
    verdict = "valid" if res.valid is True else "invalid" if res.valid is False else "unknown"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    sys.stdout.write(json.dumps({"verdict": verdict, "seconds": seconds, "maxrss_mb": rss,
                                 "configurations": res.details.get("configurations")}) + "\n")


def _measured(argv: list[str], max_mem_gb: float) -> tuple[dict[str, Any], float]:
    """Run argv under an address-space cap; its JSON line and its own peak RSS in MB (from
    wait4, this child alone). A child that runs out of the cap has the verdict "out of memory"."""
    cap = int(max_mem_gb * 2**30)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, preexec_fn=limit)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, problem = out.read().decode(), err.read().decode(errors="replace")
    rss = usage.ru_maxrss / 1024
    if proc.returncode != 0:
        if "out of memory" in problem or "MemoryError" in problem:
            return {"verdict": f"out of memory ({max_mem_gb:g} GB cap)", "seconds": math.nan}, rss
        raise SystemExit(f"{argv[0]} exited {proc.returncode}: {problem.strip()[-300:]}")
    return json.loads(text), rss


def run_ours(history: Path, model: str, limit_s: float, max_mem_gb: float) -> dict[str, Any]:
    res, rss = _measured([sys.executable, __file__, "--child", model, str(history),
                          "--time-limit", str(limit_s)], max_mem_gb)
    res["maxrss_mb"] = rss
    return res


def run_porcupine(exported: Path, model: str, limit_s: float,
                  max_mem_gb: float) -> dict[str, Any]:
    res, rss = _measured([str(PORCUPINE), "-model", model, "-timeout-s", str(limit_s),
                          str(exported)], max_mem_gb)
    res["maxrss_mb"] = rss
    return res


def cases(only: str | None, cas_processes: int) -> list[tuple[str, str, list[dict[str, Any]]]]:
    out = []
    if only in (None, "cas"):
        name = f"cas-register 1k ops x {cas_processes} processes"
        out.append((f"{name}, valid", "cas-register",
                    to_events(cas_history(1000, cas_processes, seed=1))))
        out.append((f"{name}, planted read", "cas-register",
                    plant_read(to_events(cas_history(1000, cas_processes, seed=1)))))
    if only in (None, "mutex"):
        out.append(("mutex 200k ops x 10 processes, valid", "mutex",
                    to_events(mutex_history(200_000, 10, seed=1))))
        out.append(("mutex 200k ops x 10 processes, planted double grant", "mutex",
                    to_events(mutex_history(200_000, 10, seed=1, plant=True))))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("history", nargs="?", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds, for both tools")
    ap.add_argument("--only", choices=("cas", "mutex"))
    ap.add_argument("--cas-processes", type=int, default=50,
                    help="processes of the cas-register history (default 50)")
    ap.add_argument("--max-mem-gb", type=float, default=8.0,
                    help="address-space cap of each checker's process (default 8): Porcupine "
                         "keeps a bitset of every op per configuration it caches, 15.6 GB on the "
                         "valid 200k-op mutex history, which a shared machine may not have")
    args = ap.parse_args()
    if args.child:
        _ours_child(args.history, args.child, args.time_limit)
        return
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    if not PORCUPINE.is_file():
        raise SystemExit(f"{PORCUPINE} is missing: (cd benchmarks/porcupine && go build "
                         "-o porcupine-bench .)")
    rows = []
    with tempfile.TemporaryDirectory(prefix="fc-bench-model-") as tmp:
        for label, model, events in cases(args.only, args.cas_processes):
            history = Path(tmp) / "history.jsonl"
            write_history(history, events)
            exported = Path(tmp) / "porcupine.json"
            n = export_for_porcupine(history, model, exported)
            ours = run_ours(history, model, args.time_limit, args.max_mem_gb)
            theirs = run_porcupine(exported, model, args.time_limit, args.max_mem_gb)
            decided = {"valid", "invalid"}
            # only two verdicts can contradict each other; unknown or out of memory cannot
            agree = not (ours["verdict"] in decided and theirs["verdict"] in decided
                         and ours["verdict"] != theirs["verdict"])
            rows.append((label, n, ours, theirs, agree))
            log.info("%s (%d ops judged, limit %.0f s): fencecheck %s; Porcupine %s%s", label, n,
                     args.time_limit, _cell(ours), _cell(theirs),
                     "" if agree else "  VERDICTS DIFFER")
    log.info("")
    log.info("| history | fencecheck --model | Porcupine v1.3.1 |")
    log.info("|---|---|---|")
    for label, _, ours, theirs, _ in rows:
        log.info("| %s | %s | %s |", label, _cell(ours), _cell(theirs))


def _cell(res: dict[str, Any]) -> str:
    took = "" if math.isnan(res["seconds"]) else f", {res['seconds']:.2f} s"
    return f"{res['verdict']}{took}, {res['maxrss_mb']:.0f} MB peak RSS"


if __name__ == "__main__":
    main()
