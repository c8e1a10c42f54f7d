"""Tests of checker/jobs.py on small inline histories: the duplicate rate in efficiency mode
(never a violation), `duplicate-effect` in correctness mode, and the skip without jobs."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from fencecheck.checker.base import Event, Op
from fencecheck.checker.history import pair
from fencecheck.checker.jobs import check_jobs, job_id


class H:
    """Builds a history: each call appends an invoke and its completion."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.t = 0

    def op(self, process: int, f: str, value: dict[str, Any], type_: str = "ok",
           done: dict[str, Any] | None = None, error: str | None = None) -> H:
        for typ, v in (("invoke", value), (type_, done or value)):
            self.t += 1_000_000
            self.events.append(Event(len(self.events), self.t, process, typ,  # type: ignore[arg-type]
                                     f, v, error if typ != "invoke" else None))
        return self

    def job(self, process: int, n: int, token: int, type_: str = "ok",
            applied: bool | None = None) -> H:
        value: dict[str, Any] = {"key": f"job:{n}", "value": process, "token": token,
                                 "lock": "cron", "job": n}
        if applied is None:
            return self.op(process, "write", value, type_,
                           error="stale-token" if type_ == "fail" else None)
        inv = {**value, "idempotent": True}
        return self.op(process, "write", inv, type_,
                       {**inv, "applied": applied} if type_ == "ok" else None)

    def ops(self) -> list[Op]:
        return pair(self.events)


def test_no_jobs_is_skipped_with_a_reason() -> None:
    h = H().op(0, "acquire", {"lock": "l", "lease_ms": 1000}, done={"lock": "l", "lease_ms": 1000,
                                                                     "token": 1})
    h.op(0, "write", {"key": "l", "value": 1, "token": 1, "lock": "l"})
    r = check_jobs(h.ops())
    assert r.valid is True and r.skipped and "no job" in r.skipped
    assert check_jobs([]).skipped


def test_efficiency_mode_reports_the_duplicate_rate_and_no_violation() -> None:
    h = H().job(0, 0, 1).job(0, 1, 1).job(1, 1, 2).job(1, 2, 2).job(0, 2, 1).job(2, 2, 3)
    h.job(3, 3, 4, "fail").job(4, 4, 5, "info")
    r = check_jobs(h.ops())
    assert r.valid is True and not r.violations and r.skipped is None
    d = r.details
    assert d["mode"] == "efficiency"
    assert d["jobs_executed"] == 3  # 0, 1, 2 (job 3 was refused, job 4 unknown)
    assert d["jobs_executed_more_than_once"] == 2
    assert d["duplicate_rate"] == round(2 / 3, 4)
    assert d["executions"] == 6 and d["extra_executions"] == 3
    assert d["executions_refused"] == 1 and d["executions_indeterminate"] == 1
    json.dumps(r.to_json())


def test_efficiency_mode_without_duplicates_has_rate_zero() -> None:
    r = check_jobs(H().job(0, 0, 1).job(1, 1, 2).ops())
    assert r.valid is True and r.details["duplicate_rate"] == 0.0


def test_correctness_mode_effect_applied_twice_is_a_violation() -> None:
    h = H().job(0, 0, 1, applied=True).job(1, 1, 2, applied=True).job(0, 1, 1, applied=True)
    r = check_jobs(h.ops())
    assert r.valid is False and r.details["mode"] == "correctness"
    assert [v.kind for v in r.violations] == ["duplicate-effect"]
    v = r.violations[0].to_json()
    assert v["key"] == "job:1"
    assert [(o["process"], o["token"]) for o in v["ops"]] == [(1, 2), (0, 1)]
    assert "job 1" in v["explanation"] and "\n" not in v["explanation"]
    assert r.details["count_by_kind"] == {"duplicate-effect": 1}


def test_correctness_mode_deduplicated_attempts_are_fine_but_counted() -> None:
    h = H().job(0, 0, 1, applied=True).job(1, 0, 2, applied=False).job(2, 0, 3, applied=False)
    h.job(1, 1, 2, "info", applied=True).job(2, 1, 3, applied=True)  # info never convicts
    r = check_jobs(h.ops())
    assert r.valid is True and not r.violations
    assert r.details["jobs_executed_more_than_once"] == 1  # attempts, deduplicated
    assert r.details["executions_deduplicated"] == 2


def test_job_id_from_value_or_key() -> None:
    ops = H().job(0, 7, 1).op(0, "write", {"key": "job:12", "value": 0, "token": 1}).op(
        0, "write", {"key": "job:x", "value": 0, "token": 1}).op(
        0, "read", {"key": "jobs:last", "token": 1}).ops()
    assert [job_id(o) for o in ops] == [7, 12, None, None]


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3), st.booleans()), max_size=30))
def test_rate_matches_a_direct_count(execs: list[tuple[int, int, bool]]) -> None:
    h = H()
    for job, process, ok in execs:
        h.job(process, job, 1, "ok" if ok else "fail")
    r = check_jobs(h.ops())
    done = [job for job, _, ok in execs if ok]
    if not execs:
        assert r.skipped
        return
    assert r.valid is True
    dup = {j for j in done if done.count(j) > 1}
    assert r.details["jobs_executed"] == len(set(done))
    assert r.details["jobs_executed_more_than_once"] == len(dup)
    assert r.details["duplicate_rate"] == (round(len(dup) / len(set(done)), 4) if done else 0.0)
