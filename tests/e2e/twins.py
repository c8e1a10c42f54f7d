"""Must-pass runs on a loaded machine: when a run says nothing about the library it ran.

A must-pass run judges a library only if it did enough work to judge, and, when no fault was
injected, only if every holder was granted and worked within its lease. On the parallel suite's
2-core machine (load average up to 45) neither is given: a client program may answer its first
acquire after the run's time limit (UNKNOWN: no acquire completed), an acquire may complete
seconds after the library set the lease, and a holder may be starved past its lease: the
process pause a `pause` fault makes, so a library's unsafety under a pause shows in a run
without faults (a real double grant, of a starved holder; the claim "none without faults" is
about holders granted and done within their lease).

`must_pass` then runs it once more, alone and longer, and that run is the one the test judges:
it must pass. A violation (or a failed claim) with every section inside its lease is never run
again: one false accusation fails the test.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fencecheck.checker.base import Op, Process
from fencecheck.checker.history import load_ops
from tests.e2e import test_run_backends

Outcome = tuple[int, dict[str, Any]]  # `fencecheck run`'s exit code and results.json


def always(_results: dict[str, Any]) -> bool:
    return True


def _lease_ns(o: Op) -> int | None:
    lease = o.get("lease_ms")
    return lease * 1_000_000 if isinstance(lease, int) and o.end_time is not None else None


def past_lease(history: Path) -> list[str]:
    """The holders a slow machine kept past their lease, in two ways:

    - granted late: an ok acquire whose attempt (the client's `attempt_ns`, else the invoke)
      began more than `lease_ms` before it completed, so the lease the library set at the
      attempt's start may have run out before the holder heard of it (ShedLock's JDBC provider
      sets `lock_until` from the runner's clock: an acquire done 2.5 s after its attempt began,
      three JVMs starting at once, was a grant of a lock past within 0.3 s, stop 47);
    - held late: an op of the holder (its release included) invoked more than `lease_ms` after
      its acquire, or its last ok renew, completed (surely past the lease: it began before).
    A section cut short by the end of the run is neither."""
    held: dict[Process, tuple[int, int]] = {}  # process -> (lease ns, its acquire/renew ok)
    late: list[str] = []
    for o in load_ops(history):
        lease = _lease_ns(o) if o.ok else None
        if o.f == "acquire":
            if lease is not None and o.end_time is not None:
                began = o.get("attempt_ns")
                began = began if isinstance(began, int) else o.time
                if o.end_time - began > lease:
                    late.append(f"process {o.process} granted at {o.end_time / 1e9:.1f} s, "
                                f"{(o.end_time - began) / 1e9:.1f} s after its attempt began "
                                f"(a {lease / 1e9:g} s lease)")
                held[o.process] = (lease, o.end_time)
            continue
        if o.process not in held:
            continue
        lease_ns, since = held.pop(o.process)
        if o.time - since > lease_ns:
            late.append(f"process {o.process}'s {o.f} at {o.time / 1e9:.1f} s, "
                        f"{(o.time - since) / 1e9:.1f} s into a {lease_ns / 1e9:g} s lease")
        elif o.f == "renew" and lease is not None and o.end_time is not None:
            held[o.process] = (lease, o.end_time)  # a renewal's own lease
        elif o.f != "release":
            held[o.process] = (lease_ns, since)
    return late


def undecided(run_dir: Path, outcome: Outcome, enough: Callable[[dict[str, Any]], bool],
              claim: Callable[[dict[str, Any]], bool]) -> str | None:
    """Why a must-pass run said nothing about the library (see the module's text), or None when
    it judged it. `enough`: it did enough work to judge; `claim`: what the test asserts of a
    valid run beyond its validity (say, no job run twice)."""
    code, results = outcome
    if code == 2:
        return "it decided nothing (UNKNOWN)"
    if code == 0 and not enough(results):
        return "it did too little to judge"
    if code == 1 or not claim(results):
        config = json.loads((run_dir / "test.json").read_text())["config"]
        late = past_lease(run_dir / "history.jsonl") if config["nemesis"] == ["none"] else []
        if late:
            return (f"without faults, {len(late)} holder(s) were granted or worked past their "
                    f"lease, which only a slow machine does (first: {late[0]})")
    return None


def must_pass(store: Path, name: str, first: Outcome, args: tuple[str, ...], *,
              enough: Callable[[dict[str, Any]], bool] = always,
              claim: Callable[[dict[str, Any]], bool] = always,
              again_s: int = 60) -> tuple[str, Outcome]:
    """The name and outcome of the must-pass run the test judges: `first` (the run `name` of
    `args`), or, if it said nothing about the library (`undecided`), one more run of the same
    arguments alone for `again_s` seconds (test_run_backends.run, UNKNOWN returned; at load
    average 40-50 a 30 s run's JVMs sent their first acquire 26 s in)."""
    why = undecided((store / name / "latest").resolve(), first, enough, claim)
    if why is None:
        return name, first
    print(f"{name}: {why}: running it again alone for {again_s} s")
    again = f"{name}-again"
    return again, test_run_backends.run(store, again, *args, "--time-limit", str(again_s),
                                        undecided=True)
