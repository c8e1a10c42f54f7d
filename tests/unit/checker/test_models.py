"""checker.linear.models: each model's sequential semantics, through its step function and
through whole small histories."""

from __future__ import annotations

import pytest

from fencecheck.checker.base import Op
from fencecheck.checker.linear import check_linearizable
from fencecheck.checker.linear.models import (
    ACQUIRE,
    CAS,
    HOLD,
    ILLEGAL,
    MODELS,
    READ,
    RELEASE,
    WRITE,
    freeze,
)
from tests.unit.checker.test_linear import op


def run(model: str, state: object, *calls: tuple[object, ...]) -> object:
    step = MODELS[model].step
    for call in calls:
        state = step(state, call)
        if state is ILLEGAL:
            return ILLEGAL
    return state


def test_mutex_steps() -> None:
    init = MODELS["mutex"].init
    assert run("mutex", init, (ACQUIRE,), (RELEASE,), (ACQUIRE,), (HOLD,)) is True
    assert run("mutex", init, (ACQUIRE,), (ACQUIRE,)) is ILLEGAL
    assert run("mutex", init, (RELEASE,)) is ILLEGAL
    assert run("mutex", init, (HOLD,)) is ILLEGAL


def test_owner_mutex_steps() -> None:
    init = MODELS["owner-mutex"].init
    assert run("owner-mutex", init, (ACQUIRE, 1), (HOLD, 1), (RELEASE, 1), (ACQUIRE, 2)) == 2
    assert run("owner-mutex", init, (ACQUIRE, 1), (RELEASE, 2)) is ILLEGAL
    assert run("owner-mutex", init, (ACQUIRE, 1), (HOLD, 2)) is ILLEGAL
    assert run("owner-mutex", init, (ACQUIRE, 0), (RELEASE, 0)) is None  # process 0 is an owner


def test_fenced_mutex_steps() -> None:
    init = MODELS["fenced-mutex"].init
    assert run("fenced-mutex", init, (ACQUIRE, 1, 5), (RELEASE, 1, None)) == (None, 5)
    assert run("fenced-mutex", init, (ACQUIRE, 1, 5), (RELEASE, 1, None),
               (ACQUIRE, 2, 5)) is ILLEGAL
    assert run("fenced-mutex", init, (ACQUIRE, 1, 5), (RELEASE, 1, None),
               (ACQUIRE, 2, 4)) is ILLEGAL
    assert run("fenced-mutex", init, (ACQUIRE, 1, 5), (RELEASE, 2, None)) is ILLEGAL
    # An acquire whose token is unknown still took one above every earlier token.
    assert run("fenced-mutex", init, (ACQUIRE, 1, 5), (RELEASE, 1, None), (ACQUIRE, 2, None),
               (RELEASE, 2, None), (ACQUIRE, 3, 6)) is ILLEGAL
    assert run("fenced-mutex", init, (ACQUIRE, 1, 5), (RELEASE, 1, None), (ACQUIRE, 2, None),
               (RELEASE, 2, None), (ACQUIRE, 3, 7)) == (3, 7)


def test_register_and_cas_register_steps() -> None:
    assert run("register", None, (READ, None), (WRITE, 3), (READ, 3)) == 3
    assert run("register", None, (WRITE, 3), (READ, 4)) is ILLEGAL
    assert run("register", None, (READ, 0)) is ILLEGAL  # initially nil, not 0
    assert run("cas-register", None, (WRITE, 1), (CAS, 1, 2), (READ, 2)) == 2
    assert run("cas-register", None, (WRITE, 1), (CAS, 2, 3)) is ILLEGAL
    assert run("cas-register", None, (CAS, None, 1)) == 1


def test_freeze_makes_jepsen_values_hashable() -> None:
    assert freeze([1, [2, 3]]) == (1, (2, 3))
    assert hash(freeze({"a": [1]})) == hash(freeze({"a": [1]}))


@pytest.mark.parametrize("model", ["mutex", "owner-mutex", "fenced-mutex"])
def test_lock_models_on_histories(model: str) -> None:
    good = [op(1, "acquire", 0, 1, lock="l", token=1), op(1, "release", 2, 3, lock="l", token=1),
            op(2, "acquire", 4, 5, lock="l", token=2)]
    assert check_linearizable(good, model, 5).valid is True
    double = [op(1, "acquire", 0, 1, lock="l", token=1), op(2, "acquire", 2, 3, lock="l", token=2)]
    assert check_linearizable(double, model, 5).valid is False
    # A definite failure says nothing; an indeterminate release may have freed the lock.
    fail_then = [op(1, "acquire", 0, 1, lock="l", token=1),
                 op(2, "release", 2, 3, "fail", lock="l"),
                 op(1, "release", 4, None, "info", lock="l", token=1),
                 op(3, "acquire", 5, 6, lock="l", token=3)]
    assert check_linearizable(fail_then, model, 5).valid is True


def test_only_the_owner_releases() -> None:
    ops = [op(1, "acquire", 0, 1, lock="l"), op(2, "release", 2, 3, lock="l"),
           op(2, "acquire", 4, 5, lock="l")]
    assert check_linearizable(ops, "mutex", 5).valid is True
    assert check_linearizable(ops, "owner-mutex", 5).valid is False


def test_fenced_mutex_finds_a_token_regression_a_mutex_accepts() -> None:
    ops = [op(1, "acquire", 0, 1, lock="l", token=7), op(1, "release", 2, 3, lock="l", token=7),
           op(2, "acquire", 4, 5, lock="l", token=6)]
    assert check_linearizable(ops, "owner-mutex", 5).valid is True
    res = check_linearizable(ops, "fenced-mutex", 5)
    assert res.valid is False
    assert "highest token granted is 7" in res.violations[0].explanation


def test_renew_proves_the_lock_was_held() -> None:
    ops = [op(1, "acquire", 0, 1, lock="l"), op(1, "release", 2, 3, lock="l"),
           op(1, "renew", 4, 5, lock="l")]
    assert check_linearizable(ops, "mutex", 5).valid is False
    unknown = [*ops[:2], op(1, "renew", 4, None, "info", lock="l")]
    assert check_linearizable(unknown, "mutex", 5).valid is True


def test_locks_are_separate_partitions() -> None:
    ops = [op(1, "acquire", 0, 1, lock="a"), op(2, "acquire", 2, 3, lock="b")]
    res = check_linearizable(ops, "mutex", 5)
    assert res.valid is True and res.details["partitions"] == 2


def test_nemesis_and_other_fs_are_ignored() -> None:
    nem = Op("nemesis", "acquire", "ok", 2, 20, 3, 30, {"lock": "l"})
    ops = [op(1, "acquire", 0, 1, lock="l"), nem, op(1, "write", 4, 5, lock="l", key="k", value=1)]
    res = check_linearizable(ops, "mutex", 5)
    assert res.valid is True and res.details["ops"] == 1
