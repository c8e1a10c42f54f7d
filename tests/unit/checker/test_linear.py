"""checker.linear: the search (ordering, indeterminate ops, time limit, counterexamples) on small
hand-made histories whose verdicts can be read off by eye."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from fencecheck.checker.base import CheckerError, Completion, Op
from fencecheck.checker.linear import LinearizableCheck, UnknownModel, check_linearizable


def op(process: int, f: str, start: int, end: int | None, type_: Completion = "ok",
       **value: Any) -> Op:
    """An op whose invoke is event `start` and whose completion is event `end` (None: never)."""
    return Op(process, f, type_, start, start * 10, end, None if end is None else end * 10,
              value, None)


def verdict(ops: Sequence[Op], model: str) -> object:
    return check_linearizable(sorted(ops, key=lambda o: o.index), model, 10).valid


def test_porcupine_register_examples() -> None:
    # Porcupine's TestRegisterModel (6.824 quiz 2017): a write of 100 overlapping two reads.
    ok = [op(0, "write", 0, 5, value=100), op(1, "read", 1, 4, value=100),
          op(2, "read", 2, 3, value=0)]
    assert verdict([op(9, "write", -2, -1, value=0), *ok], "register") is True
    # A read sees 200, a later read (invoked after it returned) sees the old 0 again.
    bad = [op(9, "write", -2, -1, value=0), op(0, "write", 0, 5, value=200),
           op(1, "read", 1, 2, value=200), op(2, "read", 3, 4, value=0)]
    assert verdict(bad, "register") is False


def test_counterexample_names_prefix_and_failed_op() -> None:
    ops = [op(0, "write", 0, 1, value=1), op(1, "write", 2, 3, value=2),
           op(2, "read", 4, 5, value=2), op(3, "read", 6, 7, value=1)]
    res = check_linearizable(ops, "register", 10)
    assert res.valid is False
    (v,) = res.violations
    assert v.extra["prefix"] == [0, 2, 4]
    assert v.extra["failed_op"] == 6
    assert v.key == "register"
    assert [r.index for r in v.ops] == [6, 4]
    assert "read by process 3 (index 6)" in v.explanation
    assert "holds 2" in v.explanation
    assert res.details["counterexamples"][0]["failed_op"] == 6


def test_concurrent_ops_may_take_effect_in_either_order() -> None:
    both = [op(0, "write", 0, 3, value=1), op(1, "write", 1, 2, value=2)]
    assert verdict([*both, op(2, "read", 4, 5, value=1)], "register") is True
    assert verdict([*both, op(2, "read", 4, 5, value=2)], "register") is True
    assert verdict([*both, op(2, "read", 4, 5, value=3)], "register") is False


def test_indeterminate_write_may_happen_late_or_never() -> None:
    base = [op(0, "write", 0, 1, value=1), op(1, "write", 2, None, "info", value=2)]
    late = [op(2, "read", 3, 4, value=1), op(3, "read", 5, 6, value=2)]
    assert verdict([*base, *late], "register") is True
    never = [op(2, "read", 3, 4, value=1), op(3, "read", 5, 6, value=1)]
    assert verdict([*base, *never], "register") is True
    # Once seen, it cannot be undone: 2 then 1 again needs a second write of 1.
    flip = [op(2, "read", 3, 4, value=2), op(3, "read", 5, 6, value=1)]
    assert verdict([*base, *flip], "register") is False


def test_indeterminate_op_cannot_take_effect_before_its_invoke() -> None:
    ops = [op(0, "write", 0, 1, value=1), op(2, "read", 2, 3, value=2),
           op(1, "write", 4, None, "info", value=2)]
    assert verdict(ops, "register") is False


def test_failed_ops_did_not_happen() -> None:
    ops = [op(0, "write", 0, 1, value=1), op(1, "write", 2, 3, "fail", value=2),
           op(2, "read", 4, 5, value=2)]
    assert verdict(ops, "register") is False
    assert verdict([*ops[:2], op(2, "read", 4, 5, value=1)], "register") is True


def test_partitions_are_judged_independently() -> None:
    ops = [op(0, "write", 0, 1, key="a", value=1), op(1, "write", 2, 3, key="b", value=2),
           op(2, "read", 4, 5, key="a", value=1), op(3, "read", 6, 7, key="b", value=1)]
    res = check_linearizable(ops, "register", 10)
    assert res.valid is False
    assert [v.key for v in res.violations] == ["b"]
    assert res.details["partitions"] == 2


def _hard_history(n: int) -> list[Op]:
    """n writes of distinct values all concurrent with one read of a value nobody wrote: the
    search must try every subset of the writes before it can say no."""
    ops = [op(i, "write", i, 2 * n + 2 - i, value=i) for i in range(n)]
    return [*ops, op(n, "read", n, n + 1, value=-1)]


def test_time_limit_gives_unknown_never_a_pass() -> None:
    ops = sorted(_hard_history(13), key=lambda o: o.index)
    slow = check_linearizable(ops, "register", time_limit_s=0.0)
    assert slow.valid == "unknown"
    assert slow.violations == []
    assert slow.details["unknown"] == ["register"]
    assert check_linearizable(ops, "register", None).valid is False


def test_nothing_to_judge_is_skipped() -> None:
    res = check_linearizable([op(0, "write", 0, 1, value=1)], "mutex", 10)
    assert res.valid is True
    assert res.skipped is not None and "mutex" in res.skipped


def test_unknown_model_is_a_checker_error() -> None:
    with pytest.raises(CheckerError, match="unknown model 'queue' \\(one of mutex, owner-mutex"):
        check_linearizable([], "queue", 1)
    with pytest.raises(UnknownModel):
        LinearizableCheck("queue")


def test_check_object_and_result_json() -> None:
    check = LinearizableCheck("mutex", 5)
    res = check([op(0, "acquire", 0, 1, lock="l"), op(1, "acquire", 2, 3, lock="l")])
    assert check.name == res.name == "linearizable"
    out = res.to_json()
    assert out["valid"] is False
    (v,) = out["violations"]
    assert v["kind"] == "not-linearizable" and v["lock"] == "l"
    assert v["prefix"] == [0] and v["failed_op"] == 2
