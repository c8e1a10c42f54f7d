"""The Lease evidence of client-go (checker/steps/lease.py) on small hand-made histories: a
release that wrote an empty holder over the successor's grant is named in the double grant it
let in, with results.json's "cause" pointing at the op that recorded it; the same history
without the evidence keeps the plain sentence (no invented mechanism), and evidence that does not
show whose record the release wrote over leaves the double grant counted as unexplained."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fencecheck.checker.analyze import analyze
from fencecheck.checker.history import load_ops

MS = 1_000_000
Event = tuple[int, Any, str, str, dict[str, Any]]


def _history(tmp_path: Path, events: list[Event]) -> Path:
    path = tmp_path / "history.jsonl"
    with path.open("w") as f:
        for i, (t_ms, p, typ, fn, value) in enumerate(events):
            line = {"index": i, "time": t_ms * MS, "process": p, "type": typ, "f": fn,
                    "value": value}
            if typ == "fail":
                line["error"] = "not-held"
            f.write(json.dumps(line) + "\n")
    return path


def _write(by: str, holder: str, rv: int | None, t_ms: int, base: int | None = None,
           ok: bool = True) -> dict[str, Any]:
    e: dict[str, Any] = {"by": by, "op": "update" if base is not None else "create",
                         "holder": holder, "ok": ok, "time": t_ms * MS}
    if rv is not None:
        e["rv"] = rv
    if base is not None:
        e["base_rv"] = base
    return e


def _acquire(t: int, p: int, token: int, ident: str, evidence: bool) -> list[Event]:
    ok: dict[str, Any] = {"lock": "L", "lease_ms": 2000, "token": token}
    if evidence:
        ok["evidence"] = {"identity": ident, "lease_ops": [_write(ident, ident, token, t)]}
    return [(t, p, "invoke", "acquire", {"lock": "L", "lease_ms": 2000}), (t + 10, p, "ok",
                                                                            "acquire", ok)]


def _wiped(evidence: bool, base: int = 805) -> list[Event]:
    # process 0 (rv 800) is paused past its lease; process 1 takes the Lease (rv 805); process
    # 0 wakes, its renew round has failed, and its release reads the Lease (process 1's record)
    # and writes an empty holder over it (rv 812); process 2 finds the Lease free (rv 815)
    # while process 1's lease is surely running.
    release: dict[str, Any] = {"lock": "L", "token": 800}
    done = dict(release)
    if evidence:
        done["evidence"] = {"identity": "c0-a", "lease_ops": [
            {"by": "c0-a", "op": "update", "holder": "c0-a", "base_rv": 800, "ok": False,
             "error": "deadline", "time": 20 * MS},
            {"by": "c0-a", "op": "get", "holder": "c1-b", "rv": 805, "ok": True,
             "time": 2650 * MS},
            _write("c0-a", "", 812, 2660, base=base)]}
    return [*_acquire(0, 0, 800, "c0-a", evidence), *_acquire(2500, 1, 805, "c1-b", evidence),
            (2640, 0, "invoke", "release", release), (2670, 0, "fail", "release", done),
            *_acquire(2700, 2, 815, "c2-c", evidence)]


def _mutex(path: Path) -> dict[str, Any]:
    return analyze(load_ops(path)).checks["mutex"].to_json()


def test_the_release_that_wiped_the_successor_is_named_and_linked(tmp_path: Path) -> None:
    mutex = _mutex(_history(tmp_path, _wiped(evidence=True)))
    (v,) = mutex["violations"]
    assert v["kind"] == "double-grant"
    assert ("process 0's release at 2.66 s wrote an empty holder at resourceVersion 812 over "
            "process 1's grant (token 805), though its read just before had returned process 1 "
            "as the holder (resourceVersion 805), and process 2 then took the free Lease"
            ) in v["explanation"]
    cause = v["cause"]
    assert cause["step"] == "release-wrote-empty-holder"
    assert (cause["process"], cause["rv"], cause["base_rv"]) == (0, 812, 805)
    assert cause["recorded_in"] == 4  # the release op (its invoke's index) that recorded it
    assert cause["over"] == {"process": 1, "token": 805}
    assert mutex["causes"] == {"explained": 1, "unexplained": 0}
    (incident,) = analyze(load_ops(tmp_path / "history.jsonl")).incidents
    assert incident["story"].endswith(" Process 0's release at 2.66 s wrote an empty holder at "
                                      "resourceVersion 812 over process 1's grant (token 805), "
                                      "though its read just before had returned process 1 as "
                                      "the holder (resourceVersion 805), and process 2 then took "
                                      "the free Lease.")


def test_without_evidence_the_double_grant_keeps_the_plain_sentence(tmp_path: Path) -> None:
    plain = _mutex(_history(tmp_path, _wiped(evidence=False)))
    (v,) = plain["violations"]
    assert "release" not in v["explanation"] and "resourceVersion" not in v["explanation"]
    assert v["explanation"].startswith('process 2 was granted lock "L" (token 815)')
    assert "cause" not in v and "causes" not in plain
    (incident,) = analyze(load_ops(tmp_path / "history.jsonl")).incidents
    assert incident["story"].endswith("What followed: 1 double-grant.")


def test_evidence_that_does_not_show_whose_record_was_wiped_is_unexplained(
        tmp_path: Path) -> None:
    # the release wrote over a record (rv 803) neither process 1 wrote nor the releaser read
    # as process 1's: the history cannot say it wiped process 1's grant
    events = _wiped(evidence=True, base=803)
    mutex = _mutex(_history(tmp_path, events))
    (v,) = mutex["violations"]
    assert "cause" not in v and "empty holder" not in v["explanation"]
    assert mutex["causes"] == {"explained": 0, "unexplained": 1}


def test_a_wiped_grant_whose_answer_came_late_is_named_by_the_lease_order(
        tmp_path: Path) -> None:
    # process 1's elector takes the Lease (rv 805) but its answer reaches the worker late, after
    # process 0's release wiped it (rv 812) and process 2 took the free Lease (rv 815): in the
    # history process 1's grant comes second with the lower token, and the wipe still lies
    # between the two grants in the Lease's order (a CI run of benchmarks/client_go_release.toml)
    events = [e for e in _wiped(evidence=True) if e[1] != 1]
    late = [ev for ev in _acquire(2500, 1, 805, "c1-b", evidence=True)]
    events += [late[0], (2750, 1, "ok", "acquire", late[1][4])]
    events.sort(key=lambda e: e[0])
    mutex = _mutex(_history(tmp_path, events))
    (v,) = mutex["violations"]
    assert v["kind"] == "double-grant" and v["cause"]["over"] == {"process": 1, "token": 805}
    assert ("process 0's release at 2.66 s wrote an empty holder at resourceVersion 812 over "
            "process 1's grant (token 805)") in v["explanation"]
    assert "and process 2 then took the free Lease" in v["explanation"]
    assert mutex["causes"] == {"explained": 1, "unexplained": 0}
