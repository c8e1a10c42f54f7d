"""Names the careless client step behind a violation, from the evidence the careless clients
record in their ok values (workloads/clients/careless.py): a release's `deleted_token`, a renew's
`extended_token` (Redis) or `lease_ttl_s` (etcd), and a refused renew followed by more work.

Explanations only: nothing here decides whether a violation exists; the checks do, by their
definitions (DESIGN.md). Every clause returned starts with "; " (it extends the check's own
sentence), and is empty when the history carries no such evidence (a strict client's history
never does).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fencecheck.checker.base import Op, Process
from fencecheck.checker.grants import Grant, seconds, tok, who


class CarelessSteps:
    """The careless steps of one history, indexed for the explanations."""

    def __init__(self, ops: Sequence[Op]) -> None:
        self.ops = ops
        self.built = False  # indexed on the first question: a valid history asks none

    def _build(self) -> None:
        self.built = True
        ops = self.ops
        # (lock, token of the lock removed/extended) -> the ops that did it, by other processes
        self.deletes: dict[tuple[str, int], list[Op]] = {}
        self.extends: dict[tuple[str, int], list[Op]] = {}
        # (process, its own token) -> its renews that extended another's lock
        self.extended_by: dict[tuple[Process, int], list[Op]] = {}
        self.dead_renews: dict[Process, list[Op]] = {}  # renews told "lease gone", taken as ok
        self.refused_renews: dict[Process, list[Op]] = {}
        for op in ops:
            if op.f not in ("release", "renew"):
                continue
            if op.f == "renew" and op.type == "fail":
                self.refused_renews.setdefault(op.process, []).append(op)
            v = op.value
            if not op.ok or v is None or ("deleted_token" not in v and "extended_token" not in v
                                          and "lease_ttl_s" not in v):
                continue  # a strict client's step: nothing to index (most of them)
            lock, own = v.get("lock"), v.get("token")
            if not isinstance(lock, str):
                continue
            deleted, extended = v.get("deleted_token"), v.get("extended_token")
            if op.f == "release" and type(deleted) is int and deleted != own:
                self.deletes.setdefault((lock, deleted), []).append(op)
            if op.f == "renew" and type(extended) is int and extended != own:
                self.extends.setdefault((lock, extended), []).append(op)
                if type(own) is int:
                    self.extended_by.setdefault((op.process, own), []).append(op)
            if op.f == "renew" and op.get("lease_ttl_s") == 0:
                self.dead_renews.setdefault(op.process, []).append(op)

    def double_grant(self, held: Grant, later: Grant) -> str:
        """Why `later` could be granted while `held` was surely held, if a careless step says."""
        if not self.built:
            self._build()
        # Either grant's lock may have been deleted: the later ok can be the earlier grant in
        # the service's order (a slow reply), as token order shows.
        for g in (held, later):
            if g.token is None:
                continue
            for op in self.deletes.get((g.lock, g.token), []):
                if op.time <= later.start:
                    return (f"; {who(op.process)}'s release at {seconds(op.time)} deleted the lock "
                            f"held by {who(g.process)} ({tok(g.token)}) without checking "
                            "its token")
        for a, b in ((later, held), (held, later)):
            if b.token is None:
                continue
            for op in self.extends.get((b.lock, b.token), []):
                if op.process == a.process:
                    return _extended(op, b.process, b.token)
        for g in (held, later):
            if g.token is None:
                continue
            for op in self.extended_by.get((g.process, g.token), []):
                if op.time <= later.start or g is later:
                    return _extended(op, None, op.get("extended_token"))
        for g in (later, held):
            for op in self.dead_renews.get(g.process, []):
                if op.get("lock") == g.lock:
                    return (f"; {who(g.process)}'s renew at {seconds(op.time)} was answered that "
                            "its lease was gone, and it carried on as if renewed")
        return ""

    def stale_write(self, writer: Process, token: int, write_time: int, lock: Any) -> str:
        """The careless step behind a stale write: the writer went on after a refused renewal,
        renewed someone else's lock as its own, or had its lock deleted by another's release
        (so the next grant came early)."""
        if not self.built:
            self._build()
        for op in self.refused_renews.get(writer, []):
            if op.get("token") == token and op.time < write_time:
                return (f"; {who(writer)} kept working after its renew was refused at "
                        f"{seconds(op.time)}")
        for op in self.extended_by.get((writer, token), []):
            if op.time < write_time:
                return _extended(op, None, op.get("extended_token"))
        for op in self.deletes.get((str(lock), token), []):
            if op.time < write_time:
                return (f"; {who(op.process)}'s release at {seconds(op.time)} had deleted "
                        f"{who(writer)}'s lock ({tok(token)}) without checking its token")
        return ""


def _extended(op: Op, holder: Process | None, token: int | None) -> str:
    whose = f"held by {who(holder)} ({tok(token)})" if holder is not None else f"of {tok(token)}"
    return (f"; {who(op.process)}'s renew at {seconds(op.time)} extended the lock {whose}, not "
            "its own, without checking ownership")
