"""Tests of workloads/resources/store.py: the fence rules (pure), and the real server with
StoreResource."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from fencecheck.workloads.base import DefiniteFailure, Indeterminate, StaleToken
from fencecheck.workloads.resources.store import StoreResource, StoreState
from tests.workloads.conftest import StartServer, free_port


def rd(key: str, token: int | None) -> dict[str, Any]:
    return {"op": "read", "key": key, "token": token, "lock": key}


def wr(key: str, value: int, token: int | None) -> dict[str, Any]:
    return {"op": "write", "key": key, "value": value, "token": token, "lock": key}


def test_fence_rejects_lower_tokens_on_reads_and_writes() -> None:
    s = StoreState(fencing=True)
    assert s.handle(rd("k", 1)) == {"ok": True, "value": None}  # missing key reads null
    assert s.handle(wr("k", 1, 5))["ok"]
    assert s.handle(wr("k", 2, 4))["error"] == "stale-token"
    assert s.handle(rd("k", 4))["error"] == "stale-token"
    assert s.handle(rd("k", 5)) == {"ok": True, "value": 1}  # equal token: same holder
    # a read raises the fence too
    assert s.handle(rd("k", 7))["ok"]
    assert s.handle(wr("k", 2, 6))["error"] == "stale-token"
    assert s.values == {"k": 1} and s.fences == {"k": 7}
    # fences are per key
    assert s.handle(wr("other", 1, 1))["ok"]


def test_null_token_reads_pass_without_raising_the_fence_and_writes_are_refused() -> None:
    s = StoreState(fencing=True)
    assert s.handle(wr("k", 3, 2))["ok"]
    assert s.handle(rd("k", None)) == {"ok": True, "value": 3}
    assert s.fences == {"k": 2}
    assert s.handle(wr("k", 4, None))["error"] == "stale-token"
    assert s.values == {"k": 3}


def test_fencing_off_accepts_everything() -> None:
    s = StoreState(fencing=False)
    for req in (wr("k", 1, 9), wr("k", 2, 1), rd("k", 0), wr("k", 3, None)):
        assert s.handle(req)["ok"]
    assert s.values == {"k": 3} and s.fences == {}


@pytest.mark.parametrize(
    "req",
    [
        {"op": "delete", "key": "k"},
        {"op": "read", "key": 1, "token": 1},
        {"op": "read", "key": "k", "token": "1"},
        {"op": "write", "key": "k", "value": "1", "token": 1},
        {"op": "write", "key": "k", "value": True, "token": 1},
    ],
)
def test_bad_requests(req: dict[str, Any]) -> None:
    assert StoreState(fencing=True).handle(req)["error"] == "bad-request"


def test_server_fencing_on(start_store: StartServer) -> None:
    server = start_store(fencing=True)
    res = StoreResource({"address": server.address, "op_timeout_s": 2})
    try:
        assert res.read("k", 1, "k") is None
        res.write("k", 1, 5, "k")
        with pytest.raises(StaleToken):
            res.write("k", 2, 4, "k")
        with pytest.raises(StaleToken) as e:
            res.read("k", 3, "k")
        assert e.value.error == "stale-token"
        assert res.read("k", None, "") == 1
        assert res.dump()["fences"] == {"k": 5}
    finally:
        res.close()
    lines = [json.loads(x) for x in server.log.read_text().splitlines()]
    requests = [x for x in lines if "req" in x]
    assert [x["req"]["op"] for x in requests] == ["read", "write", "write", "read", "read", "dump"]
    assert [x["resp"]["ok"] for x in requests] == [True, True, False, False, True, True]
    times = [x["mono_ns"] for x in lines]
    assert times == sorted(times)


def test_server_fencing_off_accepts_a_lower_token(start_store: StartServer) -> None:
    server = start_store(fencing=False)
    res = StoreResource({"address": server.address, "op_timeout_s": 2})
    try:
        res.write("k", 1, 5, "k")
        res.write("k", 2, 4, "k")
        assert res.read("k", 3, "k") == 2
    finally:
        res.close()


def test_connection_refused_is_definite() -> None:
    res = StoreResource({"address": f"127.0.0.1:{free_port()}", "op_timeout_s": 1})
    with pytest.raises(DefiniteFailure) as e:
        res.read("k", 1, "k")
    assert e.value.error == "connection-refused"


def test_paused_store_is_indeterminate_then_recovers(start_store: StartServer) -> None:
    server = start_store(fencing=True)
    res = StoreResource({"address": server.address, "op_timeout_s": 0.3})
    try:
        res.write("k", 1, 1, "k")
        server.pause()
        t = time.monotonic()
        with pytest.raises(Indeterminate) as e:
            res.write("k", 2, 1, "k")
        assert e.value.error == "timeout"
        assert 0.25 <= time.monotonic() - t < 2.0
        server.resume()
        # the timed-out write still took effect once the store woke: that is why it is `info`
        deadline = time.monotonic() + 3
        while res.read("k", None, "") != 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert res.read("k", None, "") == 2
    finally:
        res.close()
