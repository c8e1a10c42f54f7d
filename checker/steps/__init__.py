"""Names the *library* step behind a violation, from the evidence its client recorded in the
history (an op value's "evidence" object: docs/history-format.md, "Evidence").

Each module of this package that can read one kind of evidence declares it with a module-level
`STEPS = StepSpec(key, make)`: `key` is the evidence field it reads (client-go's "lease_ops"),
`make(ops, grants)` builds its `Explainer` over the ops that carry evidence. `LibrarySteps` builds
an explainer only for the keys a history actually carries, on the first question (a valid
history asks none).

Explanations only, as checker.careless: nothing here decides whether a violation exists. An
explainer answers with a `Cause` only when its evidence shows the step (the write, the unlock,
the renewal) and whose grant it hit; otherwise None, and the check keeps its plain sentence: a
history without evidence is never given a mechanism.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

from fencecheck.checker.base import Op, Process
from fencecheck.checker.grants import Grant

EVIDENCE = "evidence"


@dataclass(frozen=True, slots=True)
class Cause:
    """A library step the recorded evidence shows behind one violation. `clause` extends the
    check's sentence (it starts with "; "); `ref` is results.json's "cause": the step's name,
    what it did in words (`said`, the clause as a sentence), the process whose library took it,
    the op whose value recorded it (`recorded_in`, its invoke's index), when, and the step's own
    figures."""

    clause: str
    ref: dict[str, Any]


class Explainer(Protocol):
    """The explanations one kind of evidence can give."""

    def covers(self, lock: str) -> bool:
        """Whether the history carries this evidence for `lock` (then an unexplained violation
        of a kind it explains is counted as such)."""
        ...

    def double_grant(self, held: Grant, later: Grant) -> Cause | None:
        """The step that let `later` be granted while `held` was surely held, if shown."""
        ...

    def stale_write(self, writer: Process, token: int | None, write_time: int,
                    lock: str) -> Cause | None:
        """The step that left `writer` writing with a lock it no longer held, if shown."""
        ...


@dataclass(frozen=True, slots=True)
class StepSpec:
    key: str  # the field of "evidence" it reads
    make: Callable[[Sequence[Op], Sequence[Grant]], Explainer]


@cache
def specs() -> dict[str, StepSpec]:
    """Every explainer of this package, by the evidence key it reads."""
    out: dict[str, StepSpec] = {}
    for mod in pkgutil.iter_modules(__path__):
        spec = getattr(importlib.import_module(f"{__name__}.{mod.name}"), "STEPS", None)
        if isinstance(spec, StepSpec):
            out[spec.key] = spec
    return out


class LibrarySteps:
    """The explainers of one history's evidence. `ops`: the ops that may carry evidence
    (GrantTable.steps); `grants`: the grant table's grants."""

    def __init__(self, ops: Sequence[Op], grants: Sequence[Grant]) -> None:
        self.ops, self.grants = ops, grants
        self._built: list[Explainer] | None = None

    def explainers(self) -> list[Explainer]:
        if self._built is None:
            keys: set[str] = set()
            for op in self.ops:
                ev = op.get(EVIDENCE)
                if isinstance(ev, dict):
                    keys.update(ev)
            with_evidence = [op for op in self.ops if isinstance(op.get(EVIDENCE), dict)]
            found = specs()
            self._built = [found[k].make(with_evidence, self.grants)
                           for k in sorted(keys) if k in found]
        return self._built

    def covers(self, lock: str) -> bool:
        return any(e.covers(lock) for e in self.explainers())

    def double_grant(self, held: Grant, later: Grant) -> Cause | None:
        if not self.ops:
            return None
        return next((c for e in self.explainers()
                     if (c := e.double_grant(held, later)) is not None), None)

    def stale_write(self, writer: Process, token: int | None, write_time: int,
                    lock: Any) -> Cause | None:
        if not self.ops or not isinstance(lock, str):
            return None
        return next((c for e in self.explainers()
                     if (c := e.stale_write(writer, token, write_time, lock)) is not None), None)


class Tally:
    """How many violations of one check a library step explained, and how many of those the
    evidence covers it could not (results.json: the check's "causes")."""

    def __init__(self) -> None:
        self.explained = 0
        self.unexplained = 0

    def count(self, steps: LibrarySteps, lock: str, cause: Cause | None) -> None:
        if cause is not None:
            self.explained += 1
        elif steps.ops and steps.covers(lock):
            self.unexplained += 1

    def details(self) -> dict[str, Any]:
        """{"causes": {...}} where any violation was judged against evidence, else {}."""
        if not self.explained and not self.unexplained:
            return {}
        return {"causes": {"explained": self.explained, "unexplained": self.unexplained}}
