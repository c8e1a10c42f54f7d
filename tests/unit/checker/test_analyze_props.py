"""Property tests of the lock checks on simulated histories (benchmarks/gen_history.py).

A correct lease-based lock service over a fenced resource, with pauses past the lease, renewals,
expiries, releases and indeterminate operations, never yields a violation; the same history with
one planted fault of a kind yields exactly that kind.
"""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from benchmarks.gen_history import PLANTABLE, SimConfig, plant, simulate
from fencecheck.checker.analyze import analyze
from fencecheck.checker.base import Event, Results
from fencecheck.checker.history import pair

configs = st.builds(
    SimConfig,
    processes=st.integers(1, 6),
    locks=st.integers(1, 3),
    lease_ms=st.sampled_from([None, 5, 20, 200]),
    writes_per_section=st.integers(2, 3),
    fenced=st.just(True),
    p_pause=st.sampled_from([0.0, 0.1, 0.3]),
    p_info=st.sampled_from([0.0, 0.02, 0.1]),
    events=st.integers(20, 300),
    cut=st.booleans(),
    acquire_timeout_ms=st.sampled_from([0, 50, 500]),
    p_slow=st.sampled_from([0.0, 0.2]),
)
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def _analyze(events: list[dict[str, object]]) -> Results:
    return analyze(pair(Event(**e) for e in events))  # type: ignore[arg-type]


def _kinds(results: Results) -> Counter[str]:
    return Counter(v.kind for c in results.checks.values() for v in c.violations)


@SETTINGS
@given(cfg=configs, rng=st.randoms(use_true_random=False))
def test_correct_lock_over_fenced_resource_has_no_violation(cfg: SimConfig,
                                                            rng: random.Random) -> None:
    results = _analyze(simulate(cfg, rng))
    assert _kinds(results) == Counter()
    # unknown only when nothing could be judged (say the only acquire timed out)
    assert results.valid is True or (
        results.valid == "unknown" and all(c.skipped for c in results.checks.values()))


@SETTINGS
@given(cfg=configs, rng=st.randoms(use_true_random=False), kind=st.sampled_from(PLANTABLE))
def test_one_planted_fault_yields_exactly_its_kind(cfg: SimConfig, rng: random.Random,
                                                   kind: str) -> None:
    planted = plant(simulate(cfg, rng), kind, rng)
    assume(planted is not None)
    assert planted is not None
    results = _analyze(planted)
    assert set(_kinds(results)) == {kind}
    assert results.valid is False


def test_unfenced_resource_with_pauses_is_caught() -> None:
    # the same simulation without a fence: paused clients' stale writes get through
    cfg = SimConfig(processes=5, lease_ms=20, p_pause=0.3, p_info=0.0, fenced=False,
                    events=2000)
    kinds = _kinds(_analyze(simulate(cfg, random.Random(7))))
    assert {"stale-write-accepted", "lost-update"} <= set(kinds)
    assert "double-grant" not in kinds and "token-regression" not in kinds
