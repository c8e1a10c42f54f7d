"""A background renewer's extends as evidence (checker/steps/renewals.py) on small hand-made
histories: a stale holder's interleaved write is told with when its renewal thread last kept the
lock and its refused extend after the pause; without the evidence, or with a renewal recent
enough to cover the write, the sentence stays the checker's own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fencecheck.checker.analyze import analyze
from fencecheck.checker.history import load_ops

MS = 1_000_000


def _history(tmp_path: Path, extends: list[dict[str, Any]] | None) -> Path:
    # process 0 (lease 1 s) writes, is paused, and writes again at 2.9 s after process 1's
    # grant (2 s) and write (2.1 s); its release at 3.1 s is refused.
    release: dict[str, Any] = {"lock": "L", "token": None}
    done = dict(release)
    if extends is not None:
        done["evidence"] = {"renewer": "renewal thread", "expire_ms": 1000,
                            "renewals": extends}
    events: list[tuple[int, Any, str, str, dict[str, Any], str | None]] = []

    def acquire(t: int, p: int) -> None:
        events.extend([(t, p, "invoke", "acquire", {"lock": "L", "lease_ms": 1000}, None),
                       (t + 5, p, "ok", "acquire", {"lock": "L", "lease_ms": 1000,
                                                     "token": None}, None)])

    def write(t: int, p: int, value: int) -> None:
        w = {"key": "L", "value": value, "token": None, "lock": "L"}
        events.extend([(t, p, "invoke", "write", w, None), (t + 5, p, "ok", "write", w, None)])

    acquire(0, 0)
    write(100, 0, 1)
    acquire(2000, 1)
    write(2100, 1, 2)
    write(2900, 0, 2)
    events += [(3100, 0, "invoke", "release", release, None),
               (3110, 0, "fail", "release", done, "not-owner")]
    path = tmp_path / "history.jsonl"
    with path.open("w") as f:
        for i, (t_ms, p, typ, fn, value, err) in enumerate(events):
            line = {"index": i, "time": t_ms * MS, "process": p, "type": typ, "f": fn,
                    "value": value}
            if err:
                line["error"] = err
            f.write(json.dumps(line) + "\n")
    return path


def _interleaved(path: Path) -> dict[str, Any]:
    (v,) = [v for c in analyze(load_ops(path)).checks.values() for v in c.violations
            if v.kind == "interleaved-writes"]
    return v.to_json()


def test_a_renewer_that_stopped_renewing_is_named(tmp_path: Path) -> None:
    v = _interleaved(_history(tmp_path, [{"time": 600 * MS, "ok": True},
                                         {"time": 3000 * MS, "ok": False,
                                          "error": "NotAcquired"}]))
    assert ("process 0's renewal thread last extended the lock at 0.6 s (to 1 s) and did not "
            "extend it again before this write at 2.9 s; its next extend, at 3 s, was refused "
            "(NotAcquired)") in v["explanation"]
    assert v["cause"]["step"] == "renewer-stopped-renewing" and v["cause"]["recorded_in"] == 10


def test_without_evidence_or_with_a_recent_renewal_the_sentence_stays_plain(
        tmp_path: Path) -> None:
    for extends in (None, [{"time": 2500 * MS, "ok": True}]):
        v = _interleaved(_history(tmp_path, extends))
        assert "renewal" not in v["explanation"] and "cause" not in v
