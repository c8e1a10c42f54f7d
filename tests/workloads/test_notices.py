"""Lost-lock notices on the client side (workloads/notices.py): a stdio program's notice lines,
read as they come (also while no request is in flight, and between a request and its reply); the
worker's board in its three modes, recording into the event log; a strict holder's read or write
never after its notice; the history the log makes is paired and judged by the checker."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from fencecheck.checker.history import load_ops
from fencecheck.checker.notices import notices
from fencecheck.records.history import NOTICE
from fencecheck.run.history_merge import merge_logs
from fencecheck.workloads.base import Grant, Indeterminate, WorkloadError
from fencecheck.workloads.clients.stdio import StdioClient
from fencecheck.workloads.eventlog import EventLog
from fencecheck.workloads.notices import NoticeBoard, notice_mode

# Grants lock "l" with token 7; 0.3 s after the acquire's reply (no request in flight) it says
# the lock is lost; a renew is answered with a notice first, then the reply; a release with a
# notice that is not one of the schema.
PROGRAM = '''
import json, sys, threading, time
def say(**line):
    sys.stdout.write(json.dumps(line) + "\\n")
    sys.stdout.flush()
def later():
    time.sleep(0.3)
    say(op="notice", lock="l", token=7, reason="SUSPENDED")
for line in sys.stdin:
    req = json.loads(line)
    if req["op"] == "acquire":
        say(id=req["id"], status="ok", token=7)
        threading.Thread(target=later).start()
    elif req["op"] == "renew":
        say(op="notice", lock="l", reason="LOST")
        say(id=req["id"], status="ok")
    elif req["op"] == "release":
        say(op="notice", lock=3)
        say(id=req["id"], status="ok")
    else:
        break
'''


@pytest.fixture
def program(tmp_path: Path) -> list[str]:
    path = tmp_path / "noticer.py"
    path.write_text(PROGRAM)
    return [sys.executable, str(path)]


def test_a_programs_notices_are_read_as_they_come(program: list[str]) -> None:
    client = StdioClient({"cmd": program, "endpoints": ["127.0.0.1:1"], "op_timeout_s": 2.0})
    heard: list[tuple[str, int | None, str, float]] = []
    client.on_notice(lambda lock, token, reason: heard.append(
        (lock, token, reason, time.monotonic())))
    try:
        grant = client.acquire("l", 1000, 2.0)
        granted = time.monotonic()
        deadline = granted + 10
        while not heard and time.monotonic() < deadline:  # no request in flight meanwhile
            time.sleep(0.01)
        assert [h[:3] for h in heard] == [("l", 7, "SUSPENDED")]
        assert heard[0][3] - granted < 5  # read when it came, not at the next request
        client.renew(grant, 1000)  # a notice between the request and its reply
        assert [h[:3] for h in heard][1:] == [("l", None, "LOST")]
        with pytest.raises(Indeterminate) as e:  # "lock": 3 is no notice: a protocol error
            client.release(grant)
        assert e.value.error == "client-protocol"
    finally:
        client.close()


def _grant(token: int | None = 7) -> Grant:
    return Grant("l", token, 1000)


def test_the_board_records_in_its_mode(tmp_path: Path) -> None:
    assert notice_mode({}) == "off"
    with pytest.raises(WorkloadError, match=r"options\.notices"):
        notice_mode({"notices": "yes"})
    for mode in ("off", "stop", "work"):
        log = tmp_path / f"{mode}.jsonl"
        with EventLog(log, time.monotonic_ns()) as events:
            board = NoticeBoard(events, lambda: 3, mode)
            if mode != "off":
                board.heard("l", 7, "LOST")
            value = {"key": "l", "value": 1, "token": 7, "lock": "l"}
            wrote = board.invoke("write", value, lambda: events.write(3, "invoke", "write", {}))
            assert (wrote is None) == (mode == "stop"), mode
            assert board.invoke("renew", value, lambda: 0) == 0  # only reads and writes stop
            board.granted(_grant(8))
            assert board.invoke("read", {**value, "token": 8}, lambda: 0) == 0  # not told
        lines = [json.loads(x) for x in log.read_text().splitlines()]
        told = [x for x in lines if x["f"] == NOTICE]
        assert [(x["type"], x["process"], x["value"]) for x in told] == (
            [] if mode == "off" else
            [(t, 3, {"lock": "l", "token": 7, "reason": "LOST"}) for t in ("invoke", "ok")])
        assert len({x["time"] for x in told}) <= 1  # invoke and ok at one instant


def test_a_strict_holder_never_writes_after_its_notice(tmp_path: Path) -> None:
    """Notices from another thread while the worker keeps invoking writes: every write that
    got its invoke written is at or before the notice; after it, none is made."""
    log = tmp_path / "w.jsonl"
    with EventLog(log, time.monotonic_ns()) as events:
        board = NoticeBoard(events, lambda: 1, "stop")
        events.write(1, "invoke", "acquire", {"lock": "l", "lease_ms": 1000})
        events.write(1, "ok", "acquire", {"lock": "l", "lease_ms": 1000, "token": 7})
        value = {"key": "l", "value": 1, "token": 7, "lock": "l"}
        teller = threading.Timer(0.05, lambda: board.heard("l", 7, "LOST"))
        teller.start()
        stopped_at = None
        for i in range(100_000):
            invoked = board.invoke("write", value,
                                   lambda: events.write(1, "invoke", "write", value))
            if invoked is None:
                stopped_at = i
                break
            events.write(1, "ok", "write", value)
        teller.join()
    assert stopped_at is not None
    history = tmp_path / "history.jsonl"
    merge_logs([log], history)
    r = notices(load_ops(history))
    assert r.valid is True and r.details["grants_with_notice"] == 1


def test_a_careless_holders_write_after_its_notice_is_found(tmp_path: Path) -> None:
    log = tmp_path / "w.jsonl"
    with EventLog(log, time.monotonic_ns()) as events:
        board = NoticeBoard(events, lambda: 1, "work")
        events.write(1, "invoke", "acquire", {"lock": "l", "lease_ms": 1000})
        events.write(1, "ok", "acquire", {"lock": "l", "lease_ms": 1000, "token": 7})
        value: dict[str, Any] = {"key": "l", "value": 1, "token": 7, "lock": "l"}
        events.write(1, "invoke", "write", value)
        board.heard("l", 7, "LOST")  # while the write is in flight: not after it
        events.write(1, "ok", "write", value)
        time.sleep(0.001)
        assert board.invoke("write", value, lambda: events.write(1, "invoke", "write", value))
        events.write(1, "ok", "write", value)
    history = tmp_path / "history.jsonl"
    merge_logs([log], history)
    r = notices(load_ops(history))
    assert r.valid is False and [v.kind for v in r.violations] == ["write-after-notice"]
    assert r.details["lags"] + r.details["leads"] == 1
