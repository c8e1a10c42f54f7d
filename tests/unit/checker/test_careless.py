"""The careless-step explanations (checker/careless.py) on small hand-made histories: a foreign
release and a foreign renew are named in the double-grant they cause, and the same shape from a
strict client (no evidence recorded) is explained by the definitions alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fencecheck.checker.analyze import analyze
from fencecheck.checker.history import load_ops

MS = 1_000_000


def _history(tmp_path: Path, events: list[tuple[int, Any, str, str, dict[str, Any]]]) -> Path:
    path = tmp_path / "history.jsonl"
    with path.open("w") as f:
        for i, (t_ms, p, typ, fn, value) in enumerate(events):
            f.write(json.dumps({"index": i, "time": t_ms * MS, "process": p, "type": typ,
                                "f": fn, "value": value}) + "\n")
    return path


def _acquire(t: int, p: int, token: int) -> list[tuple[int, Any, str, str, dict[str, Any]]]:
    return [(t, p, "invoke", "acquire", {"lock": "L", "lease_ms": 1000}),
            (t + 1, p, "ok", "acquire", {"lock": "L", "lease_ms": 1000, "token": token})]


def _doubles(path: Path) -> list[str]:
    res = analyze(load_ops(path))
    return [v.explanation for c in res.checks.values() for v in c.violations
            if v.kind == "double-grant"]


def _foreign_release(deleted: int | None) -> list[tuple[int, Any, str, str, dict[str, Any]]]:
    # process 0 (token 1) is stale; process 1 holds token 2; process 0's careless release
    # deletes it; process 2 is granted while process 1's lease is surely running.
    value = {"lock": "L", "token": 1}
    done = value if deleted is None else {**value, "deleted_token": deleted}
    return [*_acquire(0, 0, 1), *_acquire(1500, 1, 2),
            (1600, 0, "invoke", "release", value), (1601, 0, "ok", "release", done),
            *_acquire(1602, 2, 3)]


def test_a_foreign_release_is_named_in_the_double_grant(tmp_path: Path) -> None:
    (text,) = _doubles(_history(tmp_path, _foreign_release(2)))
    assert "process 0's release at 1.6 s deleted the lock held by process 1 (token 2)" in text


def test_without_evidence_the_double_grant_is_told_by_the_definitions_alone(
        tmp_path: Path) -> None:
    (text,) = _doubles(_history(tmp_path, _foreign_release(None)))
    assert "deleted" not in text and "process 1" in text


def test_a_foreign_renew_is_named_in_the_double_grant(tmp_path: Path) -> None:
    events = [*_acquire(0, 0, 1), *_acquire(1500, 1, 2),
              (1600, 0, "invoke", "renew", {"lock": "L", "token": 1, "lease_ms": 1000}),
              (1601, 0, "ok", "renew", {"lock": "L", "token": 1, "lease_ms": 1000,
                                        "extended_token": 2})]
    (text,) = _doubles(_history(tmp_path, events))
    assert "process 0's renew at 1.6 s extended the lock held by process 1 (token 2)" in text
