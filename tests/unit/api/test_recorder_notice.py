"""`HistoryRecorder.notice`: a lost-lock notice recorded from the library's callback, also while
an op of the process is in flight; the checker reads it, and a write invoked after it is a
`write-after-notice`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fencecheck.api import HistoryRecorder, RecorderError, check_history


def test_a_notice_mid_op_then_a_write_after_it(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    with HistoryRecorder(path) as rec:
        with rec.op(1, "acquire", lock="orders", lease_ms=60_000) as op:
            op.ok(token=5)
        with rec.op(1, "write", key="orders", value=1, token=5, lock="orders") as op:
            rec.notice(1, lock="orders", token=5, reason="SUSPENDED")  # the callback's thread
            op.ok()
        with rec.op(1, "write", key="orders", value=2, token=5, lock="orders") as op:
            op.ok()
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    notice = [x for x in lines if x["f"] == "notice"]
    assert [x["type"] for x in notice] == ["invoke", "ok"]
    assert notice[0]["time"] == notice[1]["time"]
    assert notice[0]["value"] == {"lock": "orders", "token": 5, "reason": "SUSPENDED"}
    result = check_history(path)
    assert result.valid is False
    assert [v["kind"] for v in result.violations] == ["write-after-notice"]


def test_bad_notices_are_refused(tmp_path: Path) -> None:
    with HistoryRecorder(tmp_path / "h.jsonl") as rec:
        with pytest.raises(RecorderError, match="lock must be a string"):
            rec.notice(1, lock=3)  # type: ignore[arg-type]
        with pytest.raises(RecorderError, match="token must be an integer or null"):
            rec.notice(1, lock="l", token="5")  # type: ignore[arg-type]
        with rec.op(2, "acquire", lock="l", lease_ms=1000) as op:
            op.info(error="timeout")
        with pytest.raises(RecorderError, match="retired"):
            rec.notice(2, lock="l")
