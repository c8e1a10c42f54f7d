"""The SQL evidence of ShedLock's JDBC client (checker/steps/statements.py) on small hand-made
histories: an unlock by a runner whose grant had passed on, that still changed a row, is named
in the double grant it let in; the same history without the evidence, or with an unlock that
matched no row, keeps the plain sentence."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fencecheck.checker.analyze import analyze
from fencecheck.checker.history import load_ops

MS = 1_000_000
UNLOCK = "UPDATE shedlock SET lock_until = ? WHERE name = ?"


def _history(tmp_path: Path, rows: int | None) -> Path:
    # process 0 runs the job (lease 2 s) and is paused; process 1 takes the lock at 2.5 s;
    # process 0 wakes and unlocks at 2.6 s; process 2 takes the lock at 2.7 s while process 1's
    # lease is surely running.
    release: dict[str, Any] = {"lock": "job", "token": None}
    done = dict(release)
    if rows is not None:
        done["evidence"] = {"statements": [{"sql": UNLOCK, "rows": rows, "time": 2600 * MS}]}
    events: list[tuple[int, Any, str, str, dict[str, Any]]] = []
    for t, p in ((0, 0), (2500, 1)):
        events += [(t, p, "invoke", "acquire", {"lock": "job", "lease_ms": 2000}),
                   (t + 10, p, "ok", "acquire", {"lock": "job", "lease_ms": 2000, "token": None})]
    events += [(2590, 0, "invoke", "release", release), (2610, 0, "ok", "release", done),
               (2700, 2, "invoke", "acquire", {"lock": "job", "lease_ms": 2000}),
               (2710, 2, "ok", "acquire", {"lock": "job", "lease_ms": 2000, "token": None})]
    path = tmp_path / "history.jsonl"
    with path.open("w") as f:
        for i, (t_ms, p, typ, fn, value) in enumerate(events):
            f.write(json.dumps({"index": i, "time": t_ms * MS, "process": p, "type": typ,
                                "f": fn, "value": value}) + "\n")
    return path


def _mutex(path: Path) -> dict[str, Any]:
    return analyze(load_ops(path)).checks["mutex"].to_json()


def test_an_unlock_that_matched_another_runners_lock_is_named(tmp_path: Path) -> None:
    mutex = _mutex(_history(tmp_path, rows=1))
    (v,) = mutex["violations"]
    assert (f"process 0's unlock at 2.6 s, of its grant from 0.01 s, changed 1 row with "
            f"`{UNLOCK}`, while the lock was process 1's (no token), and process 2 then took "
            "it") in v["explanation"]
    assert v["cause"]["step"] == "unlock-matched-another-holder"
    assert v["cause"]["where"] == "name = ?" and v["cause"]["rows"] == 1
    assert mutex["causes"] == {"explained": 1, "unexplained": 0}


def test_without_evidence_or_with_an_unlock_of_no_row_the_sentence_stays_plain(
        tmp_path: Path) -> None:
    for rows, causes in ((None, None), (0, {"explained": 0, "unexplained": 1})):
        mutex = _mutex(_history(tmp_path, rows))
        (v,) = mutex["violations"]
        assert "unlock" not in v["explanation"] and "cause" not in v
        assert mutex.get("causes") == causes
