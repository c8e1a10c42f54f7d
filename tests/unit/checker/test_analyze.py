"""The lock checks on hand-made histories (tests/data/histories/*.jsonl, verdicts in
expected.json): one history per violation kind and per subtle case that must stay silent."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fencecheck.checker.analyze import analyze
from fencecheck.checker.base import Op
from fencecheck.checker.history import load_ops
from fencecheck.checker.verdict import check_history
from tests.conftest import REPO

DATA = REPO / "tests" / "data" / "histories"
EXPECTED: dict[str, dict[str, Any]] = json.loads((DATA / "expected.json").read_text())


def test_every_history_has_a_verdict() -> None:
    assert sorted(p.stem for p in DATA.glob("*.jsonl")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_history_verdict(name: str) -> None:
    want = EXPECTED[name]
    results = check_history(DATA / f"{name}.jsonl")
    kinds = sorted({v.kind for c in results.checks.values() for v in c.violations})
    assert kinds == sorted(want["kinds"]), want["about"]
    assert results.valid == want["valid"] and type(results.valid) is type(want["valid"]), \
        want["about"]
    skipped = sorted(n for n, c in results.checks.items() if c.skipped is not None)
    for check in want.get("skipped", []):
        assert check in skipped
    for stat, value in want.get("stats", {}).items():
        assert results.stats[stat] == value, stat
    out = results.to_json()
    json.dumps(out)  # results.json must serialise
    for check in out["checks"].values():
        for v in check["violations"]:
            assert v["explanation"] and "\n" not in v["explanation"]
            assert "lock" in v or "key" in v
            assert v["ops"] and all({"process", "index", "time_ns", "token"} <= set(o)
                                    for o in v["ops"])


def test_double_grant_names_both_grants_and_times() -> None:
    results = analyze(load_ops(DATA / "double-grant.jsonl"))
    (v,) = results.checks["mutex"].violations
    assert v.lock == "l"
    assert [(o.process, o.token) for o in v.ops] == [(0, 1), (1, 2)]
    assert "process 1 was granted" in v.explanation and "3 s" in v.explanation
    assert results.stats["first_violation_ns"] == 3_000_000_000


def test_stale_write_explanation_is_plain() -> None:
    results = analyze(load_ops(DATA / "stale-write-accepted.jsonl"))
    (v,) = results.checks["fencing"].violations
    assert v.explanation == (
        "process 1's write with token 3 was accepted at 0.3 s although the resource had "
        "already accepted token 4 at 0.1 s (from process 0)"
    )


def test_max_drift_decides_a_close_call() -> None:
    # process 1 is granted at 0.995 s; process 0's 1 s lease from its invoke at 0 s is surely
    # held until 0.99 s with 1% drift, but until 0.999 s with 0.1%
    ops = load_ops(DATA / "lease-expired-before-next-grant.jsonl")
    shifted = [_at(op, 0.995) if op.process == 1 and op.f == "acquire" else op for op in ops]
    assert analyze(shifted).valid is True
    assert analyze(shifted, max_drift=0.001).valid is False


def _at(op: Op, end_s: float) -> Op:
    return Op(op.process, op.f, op.type, op.index, op.time, op.end_index, int(end_s * 1e9),
              op.value, op.error)


def test_caps_reported_violations_but_counts_all() -> None:
    ops = []
    for i in range(150):  # 150 writes, each with a lower token than the one before
        t = i * 1000
        ops.append(Op(i, "write", "ok", 2 * i, t, 2 * i + 1, t + 10,
                      {"key": "k", "value": i, "token": 1000 - i, "lock": "l"}))
    check = analyze(ops).checks["fencing"]
    assert check.valid is False
    assert len(check.violations) == 100
    assert check.details["count"] == 149


def test_a_crashing_check_is_unknown_not_a_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError("bug")

    ops = load_ops(DATA / "fence-rejected-writes.jsonl")
    monkeypatch.setattr("fencecheck.checker.counter.counter", crash)  # what its CHECK runs
    results = analyze(ops)
    assert results.checks["counter"].valid == "unknown"
    assert results.checks["counter"].details["error"] == "RuntimeError: bug"
    assert results.checks["mutex"].valid is True
    assert results.valid == "unknown"
    assert results.exit_code == 2
    monkeypatch.setattr("fencecheck.checker.analyze.build_grants", crash)
    assert {c.valid for c in analyze(ops).checks.values()} == {"unknown"}


def test_mistyped_values_are_skipped_not_crashed_on() -> None:
    odd = [Op(0, "acquire", "ok", 0, 0, 1, 5, {"lock": ["x"], "lease_ms": "long", "token": "7"}),
           Op(1, "write", "ok", 2, 6, 3, 7, {"key": {"k": 1}, "lock": ["x"], "token": 1.5}),
           Op(2, "read", "ok", 4, 8, 5, 9, {"key": ["k"], "value": 3})]
    results = analyze(odd)
    assert results.valid == "unknown"  # nothing judgeable, and nothing crashed
    assert all(c.skipped for c in results.checks.values())


def test_a_history_with_nothing_to_judge_is_unknown() -> None:
    assert analyze([]).valid == "unknown"
    nemesis_only = [Op("nemesis", "start-pause", "ok", 0, 0, 1, 1, {"process": 1})]
    results = analyze(nemesis_only)
    assert results.valid == "unknown"
    assert results.stats["nemesis_ops_by_f"] == {"start-pause": 1}
