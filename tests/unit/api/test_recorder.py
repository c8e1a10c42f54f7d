"""HistoryRecorder writes histories the checker's strict reader accepts, from threads, asyncio
tasks and OS processes (fork and spawn), and records outcomes as DESIGN.md defines them:
an exception or a missing outcome is `info`, which retires the process id."""

from __future__ import annotations

import asyncio
import itertools
import json
import multiprocessing
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from fencecheck.api import HistoryRecorder, RecorderError, check_history
from fencecheck.checker.history import load_ops


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _cycles(rec: HistoryRecorder, process: int, n: int, yield_: Any = None) -> None:
    """n lock cycles on the process's own lock and key: acquire, write, read, release."""
    lock, key = f"lock-{process}", f"key-{process}"
    for i in range(1, n + 1):
        with rec.op(process, "acquire", lock=lock, lease_ms=60_000) as op:
            op.ok(token=i)
        with rec.op(process, "write", key=key, value=i, token=i, lock=lock) as op:
            op.ok()
        with rec.op(process, "read", key=key, token=i, lock=lock) as op:
            op.ok(value=i)
        with rec.op(process, "release", lock=lock, token=i) as op:
            op.ok()


def test_eight_threads_ten_thousand_ops_each_give_a_history_check_accepts(
        tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    start = threading.Barrier(8)

    def worker(p: int) -> None:
        start.wait()  # all at once: the most interleaving the GIL allows
        _cycles(rec, p, 2_500)  # 4 ops a cycle: 10,000 ops

    with HistoryRecorder(path) as rec:
        threads = [threading.Thread(target=worker, args=(p,)) for p in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    events = _lines(path)  # every line whole JSON: nothing torn or interleaved
    assert len(events) == 8 * 10_000 * 2
    assert [e["index"] for e in events] == list(range(len(events)))
    assert Counter(e["process"] for e in events) == {p: 20_000 for p in range(8)}
    # one after another would switch processes 7 times; under load a thread may well write its
    # first thousand events before another runs, so the whole history is what is asked
    switches = sum(a["process"] != b["process"] for a, b in itertools.pairwise(events))
    assert switches > 7, "threads ran one after another"
    result = check_history(path)
    assert result.valid is True, result.summary()
    assert result.results.stats["ops"] == 80_000
    assert not list(tmp_path.glob("*.parts")), "the part files are removed once merged"


def test_asyncio_tasks_record_with_async_with(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"

    async def task(rec: HistoryRecorder, p: int) -> None:
        for i in range(1, 51):
            async with rec.op(p, "acquire", lock=f"lock-{p}", lease_ms=60_000) as op:
                await asyncio.sleep(0)  # another task runs between invoke and completion
                op.ok(token=i)
            with rec.op(p, "release", lock=f"lock-{p}", token=i) as op:
                await asyncio.sleep(0)
                op.ok()

    async def main() -> None:
        with HistoryRecorder(path) as rec:
            await asyncio.gather(*(task(rec, p) for p in range(20)))

    asyncio.run(main())
    events = _lines(path)
    assert len(events) == 20 * 100 * 2
    assert check_history(path).valid is True


def _child_cycles(rec: HistoryRecorder, process: int) -> None:
    _cycles(rec, process, 250)
    rec.close()  # in a child: only stops writing; the parent merges


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_processes_write_one_history(tmp_path: Path, method: str) -> None:
    path = tmp_path / "history.jsonl"
    ctx = multiprocessing.get_context(method)
    with HistoryRecorder(path) as rec:
        _cycles(rec, 100, 10)  # the parent records too, before and after
        procs = [ctx.Process(target=_child_cycles, args=(rec, p)) for p in range(4)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(timeout=120)
            assert proc.exitcode == 0
        _cycles(rec, 101, 10)
    events = _lines(path)
    assert Counter(e["process"] for e in events) == {0: 2000, 1: 2000, 2: 2000, 3: 2000,
                                                     100: 80, 101: 80}
    times = [e["time"] for e in events]
    assert times == sorted(times)
    assert check_history(path).valid is True


def _record_forever(rec: HistoryRecorder, ready: Any) -> None:
    with rec.op(7, "acquire", lock="lock-7", lease_ms=60_000) as op:
        op.ok(token=1)
    with rec.op(7, "write", key="key-7", value=1, token=1, lock="lock-7"):
        ready.set()
        threading.Event().wait()  # killed here, in the middle of an op


def test_a_killed_process_keeps_what_it_recorded(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    with HistoryRecorder(path) as rec:
        proc = ctx.Process(target=_record_forever, args=(rec, ready))
        proc.start()
        assert ready.wait(60)
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
    result = check_history(path)
    assert [(e["f"], e["type"]) for e in _lines(path)] == [
        ("acquire", "invoke"), ("acquire", "ok"), ("write", "invoke")]
    assert result.results.stats["unfinished_ops"] == 1  # the write counts as info


def test_an_exception_records_info_and_retires_the_process(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    with HistoryRecorder(path) as rec:
        with pytest.raises(TimeoutError), rec.op(3, "acquire", lock="l", lease_ms=1000):
            raise TimeoutError("no reply in 5 s\nsecond line")
        with pytest.raises(RecorderError, match="retired"):
            rec.op(3, "acquire", lock="l", lease_ms=1000).__enter__()
        with rec.op(4, "acquire", lock="l", lease_ms=1000) as op:  # goes on under a new id
            op.ok(token=2)
    last = _lines(path)
    assert last[1] == {"index": 1, "time": last[1]["time"], "process": 3, "type": "info",
                       "f": "acquire", "value": None, "error": "TimeoutError: no reply in 5 s"}
    assert check_history(path).results.stats["indeterminate_ops"] == 1


def test_a_block_without_an_outcome_is_info(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    with HistoryRecorder(path) as rec, rec.op(1, "write", key="k", value=1, token=None):
        pass
    assert _lines(path)[1]["type"] == "info"
    assert "neither ok() nor fail()" in _lines(path)[1]["error"]


def test_fail_and_ok_values_complete_the_invoke(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    with HistoryRecorder(path) as rec:
        with rec.op(1, "acquire", lock="l", lease_ms=500) as op:
            op.ok(token=9)
        with rec.op(1, "write", key="k", value=1, token=9, lock="l") as op:
            op.fail(error="stale-token")
        with pytest.raises(RecorderError, match="already completed"):
            op.ok()
    events = _lines(path)
    assert events[1]["value"] == {"token": 9}
    assert events[3]["type"] == "fail" and events[3]["error"] == "stale-token"
    assert check_history(path).results.stats["writes_rejected_by_fence"] == 1


def test_one_op_at_a_time_per_process(tmp_path: Path) -> None:
    with HistoryRecorder(tmp_path / "h.jsonl") as rec, \
            rec.op(1, "acquire", lock="l", lease_ms=500) as op:
        with pytest.raises(RecorderError, match="in flight"):
            rec.op(1, "release", lock="l", token=None).__enter__()
        op.ok(token=1)


@pytest.mark.parametrize(("process", "f", "what"), [
    (-1, "acquire", "non-negative integer"),
    ("p1", "acquire", "non-negative integer"),
    (True, "acquire", "non-negative integer"),
    (1, "aquire", "f must be one of"),
])
def test_bad_process_or_op_name_is_refused(tmp_path: Path, process: Any, f: Any,
                                           what: str) -> None:
    with HistoryRecorder(tmp_path / "h.jsonl") as rec, pytest.raises(RecorderError, match=what):
        rec.op(process, f, lock="l")


def test_a_value_that_is_not_json_records_nothing(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    with HistoryRecorder(path) as rec:
        with pytest.raises(RecorderError, match=r"not JSON: .*not JSON serializable"):
            rec.op(1, "write", key="k", value=object(), token=None)
        with pytest.raises(RecorderError, match=r"not JSON: .*value=nan"):
            rec.op(1, "write", key="k", value=float("nan"), token=None)
        with pytest.raises(RecorderError, match=r"not JSON: .*inf"):
            rec.fault("pause", for_s=float("inf"))
        with rec.op(1, "read", key="k", token=None) as op:
            with pytest.raises(RecorderError, match="not JSON"):
                op.ok(value={1, 2})
            with pytest.raises(RecorderError, match=r"not JSON: .*nan"):
                op.ok(value=[1.0, float("nan")])
            op.ok(value=1)
    assert [e["type"] for e in _lines(path)] == ["invoke", "ok"]


def test_faults_become_nemesis_windows(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    with (HistoryRecorder(path) as rec, rec.fault("pause", targets=["worker-0"]),
          rec.op(1, "acquire", lock="l", lease_ms=500) as op):
        op.ok(token=1)
    events = _lines(path)
    assert [(e["process"], e["type"], e["f"]) for e in events] == [
        ("nemesis", "invoke", "start-pause"), ("nemesis", "ok", "start-pause"),
        (1, "invoke", "acquire"), (1, "ok", "acquire"),
        ("nemesis", "invoke", "stop-pause"), ("nemesis", "ok", "stop-pause")]
    assert events[0]["value"] == {"targets": ["worker-0"]}


def test_recording_after_close_is_refused(tmp_path: Path) -> None:
    rec = HistoryRecorder(tmp_path / "h.jsonl")
    assert rec.close() == tmp_path / "h.jsonl"
    assert rec.close() == tmp_path / "h.jsonl"  # idempotent
    with pytest.raises(RecorderError, match="closed"):
        rec.op(1, "acquire", lock="l", lease_ms=1).__enter__()


def test_parts_of_an_unclosed_recording_are_not_mixed_in(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    first = HistoryRecorder(path)
    with first.op(1, "acquire", lock="l", lease_ms=1000) as op:
        op.ok(token=1)
    with pytest.raises(RecorderError, match="never closed"):
        HistoryRecorder(path)
    first.close()
    with HistoryRecorder(path):  # once merged, the path can be recorded again
        pass


def _slow_acquire_then_another(path: Path, with_attempt: bool) -> set[str]:
    """Process 1's acquire takes 0.6 s, longer than its 0.5 s lease, its winning attempt sent at
    the end; process 2 is granted the lock right after."""
    with HistoryRecorder(path) as rec:
        with rec.op(1, "acquire", lock="l", lease_ms=500) as op:
            time.sleep(0.6)
            op.ok(token=1, **({"attempt_ns": rec.now_ns()} if with_attempt else {}))
        with rec.op(2, "acquire", lock="l", lease_ms=500) as op:
            op.ok(token=2)
    return {v["kind"] for v in check_history(path).violations}


def test_attempt_ns_from_the_recorders_clock_moves_the_lease_start(tmp_path: Path) -> None:
    # Counted from the invoke, the lease was over before the grant: no double grant can be said.
    assert "double-grant" not in _slow_acquire_then_another(tmp_path / "a.jsonl", False)
    assert "double-grant" in _slow_acquire_then_another(tmp_path / "b.jsonl", True)


@pytest.mark.parametrize(("f", "value", "what"), [
    ("acquire", {"lock": "l", "lease": 500}, r"unknown field lease= \(did you mean lease_ms=\?\)"),
    ("release", {"lock": "l", "tokn": 1}, r"unknown field tokn= \(did you mean token=\?\)"),
    ("read", {"kye": "k"}, r"unknown field kye= \(did you mean key=\?\)"),
    ("acquire", {"lock": "l", "colour": "red"}, r"unknown field colour=; an acquire has lock, "),
    ("acquire", {"lock": "l", "lease_ms": -5}, r"lease_ms must be a finite non-negative number "
                                                r"or null, not -5"),
    ("acquire", {"lock": "l", "lease_ms": float("nan")}, r"lease_ms must be a finite"),
    ("acquire", {"lock": 7}, r"lock must be a string, not 7"),
    ("release", {"lock": "l", "token": "1"}, r"token must be an integer or null, not '1'"),
    ("acquire", {"lease_ms": 500}, r"an acquire needs lock="),
])
def test_a_mistake_in_an_invoke_is_refused_when_made(tmp_path: Path, f: str,
                                                     value: dict[str, Any], what: str) -> None:
    path = tmp_path / "h.jsonl"
    with HistoryRecorder(path) as rec, pytest.raises(RecorderError, match=what):
        rec.op(1, f, **value)  # type: ignore[arg-type]
    assert path.read_text() == ""  # nothing was recorded


@pytest.mark.parametrize(("f", "invoke", "done", "what"), [
    ("acquire", {"lock": "l", "lease_ms": 500}, {"tokn": 1}, r"ok: unknown field tokn= \(did "
                                                             r"you mean token=\?\)"),
    ("acquire", {"lock": "l", "lease_ms": 500}, {"token": 1.5}, r"token must be an integer"),
    ("acquire", {"lock": "l", "lease_ms": 500}, {"attempt_ns": -1}, r"attempt_ns must be an "
                                                                   r"integer ns time"),
    ("renew", {"lock": "l", "token": 1}, {}, r"an ok renew needs lease_ms="),
])
def test_a_mistake_in_an_outcome_is_refused_when_made(tmp_path: Path, f: str,
                                                      invoke: dict[str, Any],
                                                      done: dict[str, Any], what: str) -> None:
    path = tmp_path / "h.jsonl"
    with HistoryRecorder(path) as rec, rec.op(1, f, **invoke) as op:  # type: ignore[arg-type]
        with pytest.raises(RecorderError, match=what):
            op.ok(**done)
        assert op.type is None  # not completed: a right ok() still can be
        op.ok(**({"lease_ms": 500} if f == "renew" else {"token": 1}))
    assert [e["type"] for e in _lines(path)] == ["invoke", "ok"]
    assert len(load_ops(path)) == 1  # what was recorded is what the strict reader accepts


def test_an_error_that_is_not_text_is_refused(tmp_path: Path) -> None:
    with HistoryRecorder(tmp_path / "h.jsonl") as rec, \
            rec.op(1, "acquire", lock="l", lease_ms=500) as op:
        with pytest.raises(RecorderError, match="error must be a string, not 7"):
            op.fail(error=7)  # type: ignore[arg-type]
        op.fail(error="busy")


def test_an_outcome_outside_its_block_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    with HistoryRecorder(path) as rec:
        op = rec.op(1, "acquire", lock="l", lease_ms=500)
        with pytest.raises(RecorderError, match=r"ok\(\) outside the `with rec.op\(...\)` "
                                                r"block of its acquire"):
            op.ok(token=1)
        with pytest.raises(RecorderError, match="outside"):
            op.fail(error="busy")
        with op:
            op.ok(token=1)
        with pytest.raises(RecorderError, match="entered already"):
            op.__enter__()
    assert [e["type"] for e in _lines(path)] == ["invoke", "ok"]


def test_the_fields_are_the_checkers() -> None:
    """The recorder's table is the strict reader's, plus a read's or write's own value."""
    from fencecheck.api.values import FIELDS
    from fencecheck.checker.reader import VALUES

    assert set(FIELDS) == set(VALUES)
    for f, spec in VALUES.items():
        assert set(FIELDS[f]) == set(spec) | ({"value"} if f in ("read", "write") else set())
