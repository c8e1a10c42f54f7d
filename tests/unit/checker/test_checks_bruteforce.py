"""The sweeps of the mutex, fencing and exclusion checks agree with the definitions in DESIGN.md
evaluated by brute force (all pairs, all triples) on small random histories."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fencecheck.checker.base import Op
from fencecheck.checker.exclusion import exclusion
from fencecheck.checker.fencing import fencing
from fencecheck.checker.grants import build_grants
from fencecheck.checker.mutex import mutex


@st.composite
def histories(draw: st.DrawFn, monotone: bool = False) -> list[Op]:
    """Per process a sequence of acquires (some failing), renews, releases and writes, each op
    with a random duration; processes overlap freely. Tokens are random, so violations abound;
    `monotone` numbers them in invoke order instead, so that the checks' shortcuts for a key or
    lock in order (fencing.in_order-style C-level passes) are taken and must agree too."""
    ops: list[tuple[int, int, Any, str, str, dict[str, Any]]] = []
    locks = ["a", "b"][: draw(st.integers(1, 2))]
    keys = ["x", "y"][: draw(st.integers(1, 2))]
    for p in range(draw(st.integers(1, 4))):
        t = draw(st.integers(0, 20))
        for _ in range(draw(st.integers(1, 10))):
            f = draw(st.sampled_from(["acquire", "acquire", "write", "write", "write", "release",
                                      "renew"]))
            lock = draw(st.sampled_from(locks))
            token = draw(st.one_of(st.none(), st.integers(0, 6)))
            dur = draw(st.integers(0, 6))
            type_ = draw(st.sampled_from(["ok", "ok", "ok", "fail"]))
            lease = draw(st.sampled_from([None, 10, 30]))
            if f == "acquire":
                value: dict[str, Any] = {"lock": lock, "lease_ms": lease, "token": token}
            elif f == "renew":
                value = {"lock": lock, "token": token, "lease_ms": lease}
            elif f == "release":
                value = {"lock": lock, "token": token}
            else:
                value = {"key": draw(st.sampled_from(keys)), "value": 1, "token": token,
                         "lock": lock}
            ops.append((t, t + dur, p, f, type_, value))
            t += dur + draw(st.integers(0, 4))
    ops.sort(key=lambda o: o[0])
    if monotone:
        ops = [(t0, t1, p, f, type_, {**v, "token": i if "token" in v else None})
               for i, (t0, t1, p, f, type_, v) in enumerate(ops)]
    # times in "ms" scaled so that lease_ms compares with them directly
    return [Op(p, f, type_, i, t0 * 1_000_000, 10_000 + i, t1 * 1_000_000, v)  # type: ignore[arg-type]
            for i, (t0, t1, p, f, type_, v) in enumerate(ops)]


@settings(max_examples=200, deadline=None)
@given(ops=histories())
def test_sweeps_match_brute_force(ops: list[Op]) -> None:
    _agree_with_brute_force(ops)


@settings(max_examples=50, deadline=None)
@given(ops=histories(monotone=True))
def test_sweeps_match_brute_force_with_tokens_in_order(ops: list[Op]) -> None:
    _agree_with_brute_force(ops)


def _agree_with_brute_force(ops: list[Op]) -> None:
    table = build_grants(ops)
    grants = table.grants
    # mutex: any two grants of one lock whose surely-held intervals overlap
    double = any(g.lock == h.lock and max(s1, s2) < min(e1, e2)
                 for g, h in itertools.combinations(grants, 2)
                 for s1, e1, _ in g.held() for s2, e2, _ in h.held())
    assert (mutex(ops, grants=table).valid is False) == double
    # token-regression
    regress = any(g1.lock == g2.lock and g1.token is not None and g2.token is not None
                  and g1.start < g2.acquire.time and g2.token <= g1.token
                  for g1, g2 in itertools.permutations(grants, 2))
    writes = [o for o in ops if o.f == "write" and o.ok]
    stale = any(w1.get("key") == w2.get("key") and type(w1.get("token")) is int
                and type(w2.get("token")) is int and w1.end_time is not None
                and w1.end_time < w2.time and w2.get("token") < w1.get("token")
                for w1, w2 in itertools.permutations(writes, 2))
    kinds = {v.kind for v in fencing(ops, grants=table).violations}
    assert ("token-regression" in kinds) == regress
    assert ("stale-write-accepted" in kinds) == stale
    # interleaved-writes, with each write's grant from the brute-force definition too
    def grant_of(w: Op) -> int | None:
        mine = [g for g in grants if g.process == w.process and g.lock == w.get("lock")
                and g.acquire.index < w.index]
        return max(mine, key=lambda g: g.acquire.index).id if mine else None

    owner = {w.index: grant_of(w) for w in writes}
    assert {k: v for k, v in owner.items() if v is not None} == table.write_grant
    interleaved = any(
        a1.get("key") == b.get("key") == a2.get("key")
        and owner[a1.index] is not None and owner[a1.index] == owner[a2.index] != owner[b.index]
        and a1.end_time < b.time and b.end_time < a2.time  # type: ignore[operator]
        for a1, b, a2 in itertools.permutations(writes, 3)
    )
    assert (exclusion(ops, grants=table).valid is False) == interleaved
