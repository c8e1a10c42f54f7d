"""The `linearizable` check: a model-based linearizability search over a paired history.

`check_linearizable(ops, model, time_limit_s)` partitions the ops by the object they touch (a lock
or a key; P-compositionality: a history is linearizable iff each object's is), searches each
partition with checker.linear.search, and reports one `not-linearizable` violation per partition
that has no linearization, carrying the longest linearizable prefix and the op that cannot be
placed after it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from fencecheck.checker.base import CheckerError, CheckResult, Op, Verdict, Violation, op_ref
from fencecheck.checker.linear.models import MODELS, Model
from fencecheck.checker.linear.search import Entry, SearchResult, search
from fencecheck.checker.registry import CheckSpec, KindSpec

__all__ = ["MODELS", "LinearizableCheck", "UnknownModel", "check_linearizable"]

log = logging.getLogger(__name__)

NAME = "linearizable"
KIND = "not-linearizable"
# Run only on request (`fencecheck check --model`): analyze does not run it itself.
CHECK = CheckSpec(NAME, (KindSpec(KIND, "the model check finds no linearization of the ops",
                                  "none"),), order=60)


def check_linearizable(
    ops: Sequence[Op], model: str, time_limit_s: float | None = None
) -> CheckResult:
    """Judge `ops` against the named model (a key of MODELS); ops the model does not speak about
    are ignored. valid is "unknown" if the time limit ran out before every partition was decided
    and none was found illegal. Raises UnknownModel (a CheckerError) for a name not in MODELS."""
    spec = _model(model)
    started = time.monotonic()
    deadline = None if time_limit_s is None else started + time_limit_s
    parts: dict[str, list[tuple[Op, Entry]]] = {}
    for op in ops:
        encoded = spec.encode(op)
        if encoded is None:
            continue
        call, optional = encoded
        if not optional and op.end_index is None:
            # A completed op always has an end; guard against hand-made Ops.
            optional = True
        parts.setdefault(spec.partition(op), []).append(
            (op, Entry(call, optional, op.index, None if optional else op.end_index))
        )
    details: dict[str, Any] = {"model": model, "partitions": len(parts)}
    if not parts:
        return CheckResult(NAME, True, skipped=f"no operations the {model} model can judge",
                           details=details)

    violations: list[Violation] = []
    unknown: list[str] = []
    explored = 0
    for name in sorted(parts):
        part = parts[name]
        part.sort(key=lambda pe: pe[0].index)
        result = search(spec, [e for _, e in part], deadline)
        explored += result.explored
        log.debug("partition %s: %d ops, %s, %d configurations", name, len(part),
                  result.valid, result.explored)
        if result.valid == "unknown":
            unknown.append(name)
        elif result.valid is False:
            violations.append(_violation(spec, name, [op for op, _ in part], result))
    valid: Verdict = False if violations else ("unknown" if unknown else True)
    details.update(
        ops=sum(len(p) for p in parts.values()),
        configurations=explored,
        elapsed_s=round(time.monotonic() - started, 6),
    )
    if unknown:
        details["unknown"] = unknown
    if violations:
        details["counterexamples"] = [v.extra for v in violations]
    return CheckResult(NAME, valid, violations, details=details)


class UnknownModel(CheckerError):
    """The user named a model that does not exist."""


def _model(name: str) -> Model:
    spec = MODELS.get(name)
    if spec is None:
        raise UnknownModel(f"unknown model {name!r} (one of {', '.join(MODELS)})")
    return spec


def _violation(spec: Model, name: str, ops: list[Op], result: SearchResult) -> Violation:
    prefix = [ops[i].index for i in result.order]
    failed = ops[result.failed] if result.failed is not None else None
    extra: dict[str, Any] = {
        "model": spec.name,
        spec.subject: name,
        "prefix": prefix,
        "failed_op": None if failed is None else failed.index,
        "state": spec.describe_state(result.state),
    }
    refs = [] if failed is None else [op_ref(failed)]
    if result.order:
        refs.append(op_ref(ops[result.order[-1]]))
    if failed is None:
        explanation = f"No order of the operations on {spec.subject} {name!r} satisfies the " \
            f"{spec.name} model."
    else:
        explanation = (
            f"No order of the operations that respects real time lets {failed.f} by process "
            f"{failed.process} (index {failed.index}) take effect before it returned, under the "
            f"{spec.name} model: the longest linearizable prefix has {len(prefix)} operations, "
            f"after which {spec.describe_state(result.state)}."
        )
    return Violation(
        kind=KIND,
        explanation=explanation,
        ops=tuple(refs),
        lock=name if spec.subject == "lock" else None,
        key=name if spec.subject == "key" else None,
        extra=extra,
    )


class LinearizableCheck:
    """The check as a `checker.base.Check`, for a fixed model and time limit."""

    name = NAME

    def __init__(self, model: str, time_limit_s: float | None = None) -> None:
        _model(model)
        self.model = model
        self.time_limit_s = time_limit_s

    def __call__(self, ops: Sequence[Op]) -> CheckResult:
        return check_linearizable(ops, self.model, self.time_limit_s)
