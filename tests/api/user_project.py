"""A user's test file using the `lock_history` fixture, for the plugin tests to run in a pytest
of its own (in this environment, and in a clean venv with only the wheel installed)."""

from __future__ import annotations

from pathlib import Path

USER_TESTS = '''
import pytest


def test_planted_double_grant(lock_history):
    with lock_history.op(1, "acquire", lock="orders", lease_ms=10_000) as op:
        op.ok(token=1)
    with lock_history.op(2, "acquire", lock="orders", lease_ms=10_000) as op:
        op.ok(token=2)  # granted while process 1 surely still holds it


def test_correct_history(lock_history):
    for process, token in ((1, 1), (2, 2)):
        with lock_history.op(process, "acquire", lock="orders", lease_ms=10_000) as op:
            op.ok(token=token)
        with lock_history.op(process, "write", key="total", value=token, token=token,
                             lock="orders") as op:
            op.ok()
        with lock_history.op(process, "release", lock="orders", token=token) as op:
            op.ok()


def test_nothing_recorded(lock_history):
    pass


def test_body_fails_and_history_is_bad(lock_history):
    with lock_history.op(1, "acquire", lock="orders", lease_ms=10_000) as op:
        op.ok(token=5)
    with lock_history.op(2, "acquire", lock="orders", lease_ms=10_000) as op:
        op.ok(token=6)
    assert 1 == 2, "the user's own assertion"
'''

EXPECTED_OUTCOMES = {
    "test_planted_double_grant": "failed",
    "test_correct_history": "passed",
    "test_nothing_recorded": "passed",
    "test_body_fails_and_history_is_bad": "failed",
}


def write_user_project(root: Path) -> Path:
    """A folder with the user's test file (no conftest: the plugin comes from the package)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "test_orders_lock.py").write_text(USER_TESTS)
    return root
