"""Kubernetes Lease operations as evidence (`lease_ops`, recorded by the client-go client,
workloads/clients/go/client-go): each Get, Create and Update of the Lease an elector made, with
the candidate's identity (`by`), the holder it read or wrote, the resourceVersion an Update was
made over (`base_rv`), the one it read or got back (`rv`), its outcome (`ok`, `error`) and when
it was sent (`time`). An acquire's ok value names the candidate it made (`identity`).

The step it can name: a **release that wiped another candidate's grant**. An Update with an empty
holder is the elector's release (client-go's ReleaseOnCancel writes no other); one that succeeded
at a resourceVersion after `held`'s grant and before `later`'s, over a record that `held` wrote
or that the releaser's own read returned naming `held`, is what let `later` in while `held`
still led. Only those facts are claimed: why the release judged itself the leader is client-go's
code (docs/findings/client-go-release.md), not the history's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fencecheck.checker.base import Op, Process
from fencecheck.checker.grants import Grant, seconds, tok, who
from fencecheck.checker.steps import EVIDENCE, Cause, StepSpec

STEP = "release-wrote-empty-holder"


@dataclass(frozen=True, slots=True)
class LeaseOp:
    """One recorded Lease operation, with the op whose value recorded it."""

    by: str
    op: str
    holder: str
    base_rv: int | None
    rv: int | None
    ok: bool
    time: int | None
    lock: str
    recorded_in: Op


def _int(x: Any) -> int | None:
    return x if type(x) is int else None


def lease_ops(ops: Sequence[Op]) -> list[LeaseOp]:
    """Every well-formed entry of the ops' `lease_ops` evidence (others are skipped)."""
    out: list[LeaseOp] = []
    for op in ops:
        ev, lock = op.get(EVIDENCE), op.get("lock")
        entries = ev.get("lease_ops") if isinstance(ev, dict) else None
        if not isinstance(entries, list) or not isinstance(lock, str):
            continue
        for e in entries:
            if not isinstance(e, dict) or not isinstance(e.get("by"), str):
                continue
            holder = e.get("holder")
            out.append(LeaseOp(e["by"], str(e.get("op")), holder if isinstance(holder, str)
                               else "", _int(e.get("base_rv")), _int(e.get("rv")),
                               e.get("ok") is True, _int(e.get("time")), lock, op))
    return out


class LeaseSteps:
    """The Lease evidence of one history, indexed for the explanations."""

    def __init__(self, ops: Sequence[Op], grants: Sequence[Grant]) -> None:
        self.entries = lease_ops(ops)
        self.locks = {e.lock for e in self.entries}
        by_acquire = {g.acquire.index: g for g in grants}
        self.grant_of: dict[str, Grant] = {}  # candidate identity -> its grant
        self.process_of: dict[str, Process] = {}  # identity -> the process that ran it
        for op in ops:
            ident = op.get(EVIDENCE, {}).get("identity") if op.f == "acquire" else None
            if isinstance(ident, str):
                self.process_of[ident] = op.process
                if op.index in by_acquire:
                    self.grant_of[ident] = by_acquire[op.index]
        self.identity = {(g.process, g.acquire.index): i for i, g in self.grant_of.items()}
        self.wrote: dict[str, set[int]] = {}  # identity -> rvs of its own successful writes
        for e in self.entries:
            if e.op in ("create", "update") and e.ok and e.holder == e.by and e.rv is not None:
                self.wrote.setdefault(e.by, set()).add(e.rv)

    def covers(self, lock: str) -> bool:
        return lock in self.locks

    def _over(self, wipe: LeaseOp, held_id: str) -> LeaseOp | bool:
        """Whether the wipe was written over `held_id`'s record: the releaser's read that
        returned that record, or True when the base is a write of held's own; False when
        neither shows it."""
        if wipe.base_rv is None:
            return False
        for e in self.entries:
            if (e.by == wipe.by and e.op == "get" and e.ok and e.rv == wipe.base_rv
                    and e.holder == held_id):
                return e
        return wipe.base_rv in self.wrote.get(held_id, ())

    def double_grant(self, held: Grant, later: Grant) -> Cause | None:
        # The Lease's order, not the history's: a grant whose answer reached its worker late
        # can come second in the history with the lower resourceVersion (its elector took the
        # Lease first, a release wiped it, and the other took the free Lease before the late
        # answer arrived). The grant a release wiped is the one of the lower token.
        if held.token is not None and later.token is not None and later.token < held.token:
            held, later = later, held
        held_id = self.identity.get((held.process, held.acquire.index))
        if held_id is None or held.token is None or held.lock not in self.locks:
            return None
        best: tuple[LeaseOp, LeaseOp | None] | None = None
        for e in self.entries:
            if (e.lock != held.lock or e.op != "update" or not e.ok or e.holder != ""
                    or e.by == held_id or e.rv is None or e.rv <= held.token
                    or (later.token is not None and e.rv >= later.token)):
                continue
            over = self._over(e, held_id)
            if over is False:
                continue
            if best is None or e.rv > (best[0].rv or 0):
                best = (e, over if isinstance(over, LeaseOp) else None)
        return None if best is None else self._cause(held, later, *best)

    def _cause(self, held: Grant, later: Grant, wipe: LeaseOp, read: LeaseOp | None) -> Cause:
        p = self.process_of.get(wipe.by, wipe.recorded_in.process)
        when = f" at {seconds(wipe.time)}" if wipe.time is not None else ""
        clause = (f"; {who(p)}'s release{when} wrote an empty holder at resourceVersion "
                  f"{wipe.rv} over {who(held.process)}'s grant ({tok(held.token)})")
        if read is not None:
            clause += (f", though its read just before had returned {who(held.process)} as the "
                       f"holder (resourceVersion {read.rv})")
        clause += f", and {who(later.process)} then took the free Lease"
        ref: dict[str, Any] = {
            "step": STEP, "said": clause.removeprefix("; "), "process": p, "candidate": wipe.by,
            "recorded_in": wipe.recorded_in.index, "time_ns": wipe.time, "rv": wipe.rv,
            "base_rv": wipe.base_rv, "over": {"process": held.process, "token": held.token}}
        if read is not None:
            ref["read"] = {"rv": read.rv, "holder": read.holder, "time_ns": read.time}
        return Cause(clause, ref)

    def stale_write(self, writer: Process, token: int | None, write_time: int,
                    lock: str) -> Cause | None:
        return None  # a woken holder's write is the pause's doing, not a Lease step


STEPS = StepSpec("lease_ops", LeaseSteps)
