"""The worked example of docs/python-api.md (shown there in full): a small threaded service that
takes redis-py's Lock on a real redis-server and increments a counter in Redis, recorded with
HistoryRecorder. The test pauses one lock holder past its lease, as a GC pause would, and
fencecheck finds the damage; without the pause the same service is judged valid."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.exceptions import LockError
from redis.retry import Retry

from fencecheck.api import HistoryRecorder, check_history

LEASE_MS = 1500


class CounterService:
    """Worker threads that each, in a loop: take the lock, then twice read the counter and
    write it back plus one, then release. `in_critical_section(worker)` is called before each
    write: a seam for the test (a no-op in production)."""

    def __init__(self, client: redis.Redis, rec: HistoryRecorder, workers: int = 3,
                 in_critical_section: Callable[[int], None] = lambda worker: None) -> None:
        self.client = client
        self.rec = rec
        self.workers = workers
        self.in_critical_section = in_critical_section
        self.stop = threading.Event()

    def run(self, seconds: float) -> None:
        threads = [threading.Thread(target=self._worker, args=(w,)) for w in range(self.workers)]
        for t in threads:
            t.start()
        time.sleep(seconds)
        self.stop.set()
        for t in threads:
            t.join()

    def _worker(self, worker: int) -> None:
        process = worker
        while not self.stop.is_set():
            try:
                self._cycle(worker, process)
            except redis.RedisError:
                # The op that raised was recorded as info: its outcome is unknown, and the
                # process id is retired. Go on under a new one.
                process += self.workers

    def _cycle(self, worker: int, process: int) -> None:
        rec = self.rec
        lock = self.client.lock("counter-lock", timeout=LEASE_MS / 1000)
        with rec.op(process, "acquire", lock="counter-lock", lease_ms=LEASE_MS) as op:
            # redis-py's blocking acquire polls; spelled out, so that the lease counts from
            # the attempt that won (attempt_ns), not from the first one.
            deadline = time.monotonic() + 2
            while True:
                attempt_ns = rec.now_ns()
                if lock.acquire(blocking=False):
                    op.ok(token=None, attempt_ns=attempt_ns)  # redis-py's Lock: no token
                    break
                if time.monotonic() > deadline:
                    op.fail(error="timeout")
                    return
                time.sleep(0.01)
        for _ in range(2):
            with rec.op(process, "read", key="counter", lock="counter-lock", token=None) as op:
                value = int(self.client.get("counter") or 0)
                op.ok(value=value)
            self.in_critical_section(worker)
            with rec.op(process, "write", key="counter", value=value + 1, lock="counter-lock",
                        token=None) as op:
                self.client.set("counter", value + 1)
                op.ok()
        with rec.op(process, "release", lock="counter-lock", token=None) as op:
            try:
                lock.release()
                op.ok()
            except LockError:  # the lease expired and someone else holds the lock now
                op.fail(error="not-owner")


@pytest.fixture
def redis_client(tmp_path: Path) -> Iterator[redis.Redis]:
    """A redis-server of the test's own on a free loopback port, stopped at the end."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (scripts/setup.sh installs it)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # No retries behind the history's back: a retried command would be an op not recorded.
    client = redis.Redis(port=port, socket_timeout=2, retry=Retry(NoBackoff(), 0))
    try:
        for _ in range(200):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        yield client
    finally:
        client.close()
        server.terminate()
        server.wait(timeout=10)


def final_read(client: redis.Redis, rec: HistoryRecorder) -> None:
    """One last read of the counter, so that the counter check can judge it."""
    with rec.op(1000, "read", key="counter", token=None) as op:
        op.ok(value=int(client.get("counter") or 0))


def test_a_paused_lock_holder_loses_updates(redis_client: redis.Redis, tmp_path: Path) -> None:
    rec = HistoryRecorder(tmp_path / "history.jsonl")
    calls = 0

    def pause_worker_0_once(worker: int) -> None:
        nonlocal calls
        if worker == 0:
            calls += 1
            if calls == 2:  # between its first and second write of one critical section
                with rec.fault("pause", targets=["worker-0"]):
                    time.sleep(LEASE_MS / 1000 * 2)  # a GC pause twice the lease

    with rec:
        CounterService(redis_client, rec, in_critical_section=pause_worker_0_once).run(5.0)
        final_read(redis_client, rec)

    result = check_history(rec.path)
    print(result.summary())
    assert result.valid is False
    kinds = {v["kind"] for v in result.violations}
    assert {"interleaved-writes", "lost-update"} <= kinds
    first = result.incidents[0]
    assert first["stale_grant"]["process"] == 0
    assert first["fault"]["f"] == "pause"
    assert first["fault"]["value"] == {"targets": ["worker-0"]}


def test_without_the_pause_the_service_is_judged_valid(redis_client: redis.Redis,
                                                       tmp_path: Path) -> None:
    with HistoryRecorder(tmp_path / "history.jsonl") as rec:
        CounterService(redis_client, rec).run(3.0)
        final_read(redis_client, rec)
    result = check_history(rec.path)
    assert result.valid is True, result.summary()
    assert result.results.stats["ops_by_f"]["write"]["ok"] > 10  # it did work


def test_the_docs_show_this_example() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"
    code = Path(__file__).read_text()
    example = code[code.index("import shutil"):code.index("\n\ndef test_the_docs_show")]
    assert example in docs.read_text(), "docs/python-api.md must show this file's code"
