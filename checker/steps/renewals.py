"""A background renewer's extends as evidence (`renewals`, recorded by the python-redis-lock and
aioredlock clients, workloads/clients/pylib.py): each extend its renewal thread or watchdog made
for one grant (`time`, `ok`, `error`), with `renewer` (what made them) and `expire_ms` (how long
each extend set the key to live), kept in the value of that grant's release.

The step it can name: **a renewer that did not renew**. A write made after the grant's last
successful extend had run out (no extend for longer than the key's expiry) was made with a lock
the library had stopped keeping; a refused extend after the gap, where recorded, is the renewer
finding the lock gone. Only the extends, their outcomes and their times are claimed: why the
renewer was silent (a paused process) is the fault's story, told beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fencecheck.checker.base import Op, Process
from fencecheck.checker.grants import Grant, seconds, who
from fencecheck.checker.steps import EVIDENCE, Cause, StepSpec

STEP = "renewer-stopped-renewing"


@dataclass(frozen=True, slots=True)
class Renewals:
    """The extends recorded by one op (a release) for its grant."""

    op: Op
    renewer: str
    expire_ns: int
    extends: tuple[tuple[int, bool, str | None], ...]  # (time, ok, error), in time order


def renewals(ops: Sequence[Op]) -> list[Renewals]:
    out: list[Renewals] = []
    for op in ops:
        ev = op.get(EVIDENCE)
        if not isinstance(ev, dict) or not isinstance(ev.get("renewals"), list):
            continue
        expire = ev.get("expire_ms")
        if type(expire) is not int or expire <= 0:
            continue
        extends = sorted((e["time"], e.get("ok") is True, e.get("error"))
                         for e in ev["renewals"]
                         if isinstance(e, dict) and type(e.get("time")) is int)
        out.append(Renewals(op, str(ev.get("renewer", "renewer")), expire * 1_000_000,
                            tuple(extends)))
    return out


class RenewalSteps:
    """The renewers' extends of one history, by the process and lock that recorded them."""

    def __init__(self, ops: Sequence[Op], grants: Sequence[Grant]) -> None:
        self.by: dict[tuple[Process, Any], list[Renewals]] = {}
        for r in renewals(ops):
            self.by.setdefault((r.op.process, r.op.get("lock")), []).append(r)
        self.grants = grants

    def covers(self, lock: str) -> bool:
        return any(lk == lock for _, lk in self.by)

    def double_grant(self, held: Grant, later: Grant) -> Cause | None:
        return None  # a renewer's silence lets a write through, not a grant

    def stale_write(self, writer: Process, token: int | None, write_time: int,
                    lock: str) -> Cause | None:
        own = [g for g in self.grants if g.process == writer and g.lock == lock
               and g.start <= write_time]
        if not own:
            return None
        g = max(own, key=lambda x: x.start)
        # the release of that grant recorded its extends: the first recording op after it
        rec = next((r for r in sorted(self.by.get((writer, lock), []), key=lambda r: r.op.time)
                    if r.op.time >= g.start), None)
        if rec is None:
            return None
        done = [t for t, ok, _ in rec.extends if ok and g.start <= t <= write_time]
        base = max(done) if done else g.start
        if write_time - base <= rec.expire_ns:
            return None  # renewed recently enough: not this step
        expire_s = rec.expire_ns / 1e9
        clause = (f"; {who(writer)}'s {rec.renewer} "
                  + (f"last extended the lock at {seconds(base)} (to {expire_s:g} s) and did not "
                     f"extend it again before this write at {seconds(write_time)}" if done
                     else f"had not extended the lock since its grant at {seconds(base)} (a key "
                     f"of {expire_s:g} s) when this write came at {seconds(write_time)}"))
        refused = next(((t, err) for t, ok, err in rec.extends if t > base and not ok), None)
        if refused is not None:
            clause += (f"; its next extend, at {seconds(refused[0])}, was refused"
                       + (f" ({refused[1]})" if refused[1] else ""))
        ref: dict[str, Any] = {
            "step": STEP, "said": clause.removeprefix("; "), "process": writer,
            "recorded_in": rec.op.index, "time_ns": base, "renewer": rec.renewer,
            "expire_ms": rec.expire_ns // 1_000_000, "write_ns": write_time,
            "refused_ns": refused[0] if refused else None}
        return Cause(clause, ref)


STEPS = StepSpec("renewals", RenewalSteps)
