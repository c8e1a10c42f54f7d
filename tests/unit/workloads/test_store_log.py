"""The fenced store's request log (workloads/resources/store.py): one JSON line per request,
holding the
request as received and the reply as sent, whatever spacing the request came with."""

from __future__ import annotations

import io
import json

from fencecheck.workloads.resources.store import StoreServer, StoreState


def test_each_request_is_logged_as_one_json_line_with_its_reply() -> None:
    log = io.BytesIO()
    server = StoreServer(StoreState(fencing=True), log)
    requests = [
        b' {"id": 1, "op": "write", "key": "k", "value": 1, "token": 5, "lock": "k"}\r',
        b'{"id":2,"op":"read","key":"k","token":4,"lock":"k"}',
        b"not json",
    ]
    replies = [json.loads(server.answer(r, "10.0.0.1:4242")) for r in requests]
    assert [r["ok"] for r in replies] == [True, False, False]
    lines = [json.loads(x) for x in log.getvalue().splitlines()]
    assert [x["req"] for x in lines] == [
        {"id": 1, "op": "write", "key": "k", "value": 1, "token": 5, "lock": "k"},
        {"id": 2, "op": "read", "key": "k", "token": 4, "lock": "k"},
        {"raw": "not json"},
    ]
    assert [x["resp"] for x in lines] == replies
    assert replies[1]["error"] == "stale-token" and replies[2]["error"] == "bad-request"
    assert all(x["peer"] == "10.0.0.1:4242" and isinstance(x["mono_ns"], int) for x in lines)
