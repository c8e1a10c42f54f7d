"""The end-to-end suite's rule for must-pass runs on a loaded machine (tests/e2e/twins.py): a run
that said nothing about the library is run again, a violation with every holder inside its lease
never is. Pure logic on hand-written histories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import test_run_backends
from tests.e2e.twins import must_pass, past_lease, undecided

S = 1_000_000_000  # ns


def history(tmp_path: Path, *ops: tuple[int, str, str, float, dict[str, Any]]) -> Path:
    """A run directory (test.json, history.jsonl) of (process, type, f, seconds, value) events."""
    lines = [json.dumps({"index": i, "time": int(t * S), "process": p, "type": ty, "f": f,
                         "value": v}) for i, (p, ty, f, t, v) in enumerate(ops)]
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "history.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path


def section(p: int, start: float, release_at: float, lease_ms: int = 2000,
            renew_at: float | None = None) -> list[tuple[int, str, str, float, dict[str, Any]]]:
    acq = {"lock": "l", "lease_ms": lease_ms}
    ops = [(p, "invoke", "acquire", start, acq), (p, "ok", "acquire", start + 0.1,
                                                  {**acq, "token": None})]
    if renew_at is not None:
        renew = {"lock": "l", "lease_ms": lease_ms}
        ops += [(p, "invoke", "renew", renew_at, renew), (p, "ok", "renew", renew_at + 0.05, renew)]
    return [*ops, (p, "invoke", "release", release_at, {"lock": "l"}),
            (p, "ok", "release", release_at + 0.05, {"lock": "l"})]


def test_a_release_after_the_lease_is_past_it_and_one_within_is_not(tmp_path: Path) -> None:
    run_dir = history(tmp_path, *section(0, 0.0, 2.0), *section(1, 3.0, 5.5))
    late = past_lease(run_dir / "history.jsonl")  # the lease counts from the acquire's ok
    assert late == ["process 1's release at 5.5 s, 2.4 s into a 2 s lease"]


def test_a_grant_that_came_a_lease_after_its_attempt_began_is_late(tmp_path: Path) -> None:
    acq = {"lock": "l", "lease_ms": 2000}
    waited = [(0, "invoke", "acquire", 0.0, acq), (0, "ok", "acquire", 2.5, {**acq, "token": 1}),
              (0, "invoke", "release", 2.6, {"lock": "l"})]
    late = past_lease(history(tmp_path / "a", *waited) / "history.jsonl")
    assert late == ["process 0 granted at 2.5 s, 2.5 s after its attempt began (a 2 s lease)"]
    # the client says its last attempt began at 1.0 s: the wait before it is not the lease's
    retried = [*waited[:1], (0, "ok", "acquire", 2.5, {**acq, "token": 1, "attempt_ns": S}),
               *waited[2:]]
    assert past_lease(history(tmp_path / "b", *retried) / "history.jsonl") == []


def test_a_renewal_restarts_the_lease_and_a_section_cut_off_by_the_end_is_not_late(
        tmp_path: Path) -> None:
    unended = [(2, "invoke", "acquire", 0.0, {"lock": "l", "lease_ms": 2000}),
               (2, "ok", "acquire", 0.1, {"lock": "l", "lease_ms": 2000, "token": None})]
    run_dir = history(tmp_path, *section(0, 0.0, 3.0, renew_at=1.5), *unended)
    assert past_lease(run_dir / "history.jsonl") == []


def outcome(tmp_path: Path, code: int, nemesis: str, release_at: float) -> tuple[Path, Any]:
    run_dir = history(tmp_path, *section(0, 0.0, release_at))
    (run_dir / "test.json").write_text(json.dumps({"config": {"nemesis": [nemesis]}}))
    return run_dir, (code, {"stats": {}})


@pytest.mark.parametrize(("code", "nemesis", "release_at", "why"), [
    (0, "none", 1.0, None),  # it passed
    (1, "none", 1.0, None),  # a violation inside the lease: the library's, never run again
    (1, "pause", 5.0, None),  # under faults a holder past its lease is what the fault does
    (1, "none", 5.0, "worked past their"),  # the machine starved the holder
    (2, "none", 1.0, "decided nothing"),
])
def test_what_is_run_again(tmp_path: Path, code: int, nemesis: str, release_at: float,
                           why: str | None) -> None:
    run_dir, out = outcome(tmp_path, code, nemesis, release_at)
    said = undecided(run_dir, out, lambda r: True, lambda r: True)
    assert (said is None) if why is None else (said is not None and why in said)


def test_too_little_work_or_a_failed_claim_past_the_lease_is_run_again(tmp_path: Path) -> None:
    run_dir, out = outcome(tmp_path, 0, "none", 1.0)
    assert undecided(run_dir, out, lambda r: False, lambda r: True) == "it did too little to judge"
    assert undecided(run_dir, out, lambda r: True, lambda r: False) is None  # inside its lease
    run_dir, out = outcome(tmp_path, 0, "none", 5.0)
    assert undecided(run_dir, out, lambda r: True, lambda r: False) is not None


def test_must_pass_judges_the_run_again_alone_and_longer(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "store"
    _, out = outcome(store / "twin" / "latest", 2, "none", 1.0)
    calls: list[tuple[Any, ...]] = []

    def run(*args: Any, **kw: Any) -> tuple[int, dict[str, Any]]:
        calls.append((*args, kw))
        return 0, {"again": True}

    monkeypatch.setattr(test_run_backends, "run", run)
    name, again = must_pass(store, "twin", out, ("--nemesis", "none"), again_s=20)
    assert name == "twin-again" and again == (0, {"again": True})
    assert calls == [(store, "twin-again", "--nemesis", "none", "--time-limit", "20",
                      {"undecided": True})]
    _, passed = outcome(store / "twin" / "latest", 0, "none", 1.0)
    assert must_pass(store, "twin", passed, ()) == ("twin", passed) and len(calls) == 1
