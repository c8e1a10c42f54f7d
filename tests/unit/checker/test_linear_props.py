"""Generated histories for checker.linear (Hypothesis).

Each history starts as a sequential run of a register or a mutex: op k takes effect at time
10 * k. Every op is then given to one of a few processes and stretched into an interval around
its point, so ops overlap as in a real run while each process still does one op at a time. Such a
history is linearizable by construction; planting one wrong observation makes it not.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from fencecheck.checker.base import Completion, Op
from fencecheck.checker.linear import check_linearizable

GAP = 10  # time between consecutive linearization points

Spec = tuple[str, dict[str, Any], int]  # (f, value, process)


@st.composite
def stretched(draw: st.DrawFn, seq: list[Spec]) -> list[Op]:
    """Intervals around the points 10*k: a process's op ends before its next op is invoked, and
    both fall between the two ops' points; a process's last op may be left indeterminate."""
    by_process: dict[int, list[int]] = {}
    for k, (_, _, p) in enumerate(seq):
        by_process.setdefault(p, []).append(k)
    start: dict[int, int] = {}
    end: dict[int, int | None] = {}
    for ks in by_process.values():
        start[ks[0]] = draw(st.integers(-GAP, 0)) + ks[0] * GAP
        for a, b in itertools.pairwise(ks):
            c = draw(st.integers(a * GAP, b * GAP - 1))
            end[a] = c
            start[b] = draw(st.integers(c + 1, b * GAP))
        last = ks[-1]
        end[last] = None if draw(st.booleans()) and seq[last][0] == "write" else (
            last * GAP + draw(st.integers(0, 3 * GAP)))
    # Number events by time; at a tie the invoke comes first, which only adds overlap.
    times = sorted([(start[k], 0, k) for k in start]
                   + [(t, 1, k) for k, t in end.items() if t is not None])
    index = {(kind, k): i for i, (_, kind, k) in enumerate(times)}
    ops = []
    for k, (f, value, p) in enumerate(seq):
        t_end = end[k]
        type_: Completion = "ok" if t_end is not None else "info"
        ops.append(Op(p, f, type_, index[(0, k)], start[k],
                      None if t_end is None else index[(1, k)], t_end, value))
    return sorted(ops, key=lambda o: o.index)


@st.composite
def register_runs(draw: st.DrawFn) -> list[Spec]:
    """A sequential register run with reads that return what the register holds."""
    n = draw(st.integers(2, 24))
    procs = draw(st.integers(1, 5))
    current: int | None = None
    seq: list[Spec] = []
    for _ in range(n):
        p = draw(st.integers(0, procs - 1))
        if draw(st.booleans()):
            current = draw(st.integers(0, 3))
            seq.append(("write", {"key": "k", "value": current}, p))
        else:
            seq.append(("read", {"key": "k", "value": current}, p))
    return seq


@st.composite
def mutex_runs(draw: st.DrawFn) -> list[Spec]:
    """A sequential lock run: grants in turn, each released by its holder, tokens increasing."""
    grants = draw(st.integers(2, 10))
    procs = draw(st.integers(1, 5))
    seq: list[Spec] = []
    for token in range(1, grants + 1):
        p = draw(st.integers(0, procs - 1))
        seq.append(("acquire", {"lock": "l", "token": token}, p))
        seq.append(("release", {"lock": "l", "token": token}, p))
    return seq


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_stretched_register_runs_are_linearizable_and_a_flipped_read_is_not(
    data: st.DataObject,
) -> None:
    ops = data.draw(register_runs().flatmap(stretched))
    assert check_linearizable(ops, "register", 10).valid is True
    assert check_linearizable(ops, "cas-register", 10).valid is True
    reads = [i for i, o in enumerate(ops) if o.f == "read" and o.ok]
    if not reads:
        return
    i = data.draw(st.sampled_from(reads))
    # No write ever stores -1, so no order explains reading it.
    ops[i] = replace(ops[i], value={**(ops[i].value or {}), "value": -1})
    res = check_linearizable(ops, "register", 10)
    assert res.valid is False
    assert res.violations[0].extra["failed_op"] == ops[i].index


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_stretched_mutex_runs_are_linearizable_and_a_lost_release_is_not(
    data: st.DataObject,
) -> None:
    ops = data.draw(mutex_runs().flatmap(stretched))
    for model in ("mutex", "owner-mutex", "fenced-mutex"):
        assert check_linearizable(ops, model, 10).valid is True, model
    # Without one definite release, the next definite acquire finds the lock held.
    releases = [i for i, o in enumerate(ops) if o.f == "release" and o.ok]
    later = [i for i in releases if any(o.f == "acquire" and o.ok and o.index > ops[i].index
                                        for o in ops)]
    if not later:
        return
    i = data.draw(st.sampled_from(later))
    broken = ops[:i] + ops[i + 1:]
    for model in ("mutex", "owner-mutex", "fenced-mutex"):
        assert check_linearizable(broken, model, 10).valid is False, model
