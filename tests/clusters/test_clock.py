"""Tests of clusters/faults/clock.py: the LD_PRELOAD clock shim against real redis-server and plain
processes, the offset-file primitives (bump, strobe, reset) and the etcd refusal."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from fencecheck.clusters.base import ClusterError, NemesisOp
from fencecheck.clusters.faults.clock import (
    ClockControl,
    ClockNemesis,
    build_shim,
    check_clock_supported,
)
from fencecheck.clusters.services.redis import RedisService
from tests.servers import clock_control, random_loopback_nodes, redis_service

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs cc")

_TIME_PY = "import time; print(time.time())"


@pytest.fixture
def clocks(tmp_path: Path) -> Iterator[ClockControl]:
    nodes = random_loopback_nodes("n", 2)
    with clock_control(tmp_path / "clock", nodes, tmp_path / "cache") as c:
        yield c


@pytest.fixture
def shimmed_redis(clocks: ClockControl, tmp_path: Path) -> Iterator[RedisService]:
    with redis_service(clocks.nodes, tmp_path / "store", clocks.env_for) as svc:
        yield svc


def _client(svc: RedisService, node: str) -> redis.Redis:
    host, port = svc.endpoints()[int(node[1:]) - 1].split(":")
    return redis.Redis(host=host, port=int(port), socket_timeout=2)


def _py_time(env: dict[str, str] | None) -> float:
    out = subprocess.run(
        [sys.executable, "-c", _TIME_PY],
        env={**os.environ, **env} if env else None,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout)


def test_etcd_is_refused_with_the_reason() -> None:
    with pytest.raises(ClusterError, match="vDSO"):
        check_clock_supported("etcd")
    for ok in ("redis", "redlock", "redis-sentinel", "zookeeper"):
        check_clock_supported(ok)


def test_build_shim_is_cached_by_source_hash(tmp_path: Path) -> None:
    first = build_shim(tmp_path)
    mtime = first.stat().st_mtime_ns
    assert build_shim(tmp_path) == first
    assert first.stat().st_mtime_ns == mtime
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no temp files left


def test_bump_expires_a_key_on_that_node_only(
    shimmed_redis: RedisService, clocks: ClockControl
) -> None:
    r1, r2 = _client(shimmed_redis, "n1"), _client(shimmed_redis, "n2")
    try:
        for r in (r1, r2):
            assert r.set("k", "v", px=60000)
            assert 59000 < r.pttl("k") <= 60000
        assert clocks.bump("n1", 120.0) == {"n1": 120.0}
        time.sleep(0.05)  # the shim re-reads its offset file at most every 10 ms
        assert r1.get("k") is None, "the key should have expired by n1's skewed clock"
        assert r2.get("k") == b"v", "n2's clock was not touched"
        assert abs(float(r1.time()[0]) - time.time() - 120) < 5
        clocks.reset_all()
        time.sleep(0.05)
        assert abs(float(r1.time()[0]) - time.time()) < 5
    finally:
        r1.close()
        r2.close()


def test_only_shimmed_processes_see_the_offset(clocks: ClockControl) -> None:
    clocks.bump("n1", -3600.0)
    clocks.bump("n1", 600.5)
    assert clocks.offset_s("n1") == pytest.approx(-2999.5)
    skewed = _py_time({**clocks.env_for("n1")})
    plain = _py_time(None)
    assert skewed - plain == pytest.approx(-2999.5, abs=2.0)
    assert abs(plain - time.time()) < 2.0
    other = _py_time({**clocks.env_for("n2")})
    assert abs(other - time.time()) < 2.0


def test_coarse_clock_gettimeofday_and_time_are_all_moved(clocks: ClockControl) -> None:
    clocks.bump("n1", 86400.0)
    code = (
        "import ctypes, time\n"
        "print(time.clock_gettime(time.CLOCK_REALTIME))\n"
        "print(time.clock_gettime(5))\n"  # CLOCK_REALTIME_COARSE
        "libc = ctypes.CDLL(None)\n"
        "print(libc.time(None))\n"
        "tv = (ctypes.c_long * 2)(); libc.gettimeofday(tv, None); print(tv[0])\n"
        "print(time.monotonic())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **clocks.env_for("n1")},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    now = time.time()
    for v in out[:4]:
        assert float(v) - now == pytest.approx(86400, abs=3)
    assert float(out[4]) == pytest.approx(time.monotonic(), abs=3)  # monotonic never moves


def test_strobe_flips_and_restores(clocks: ClockControl) -> None:
    clocks.bump("n2", 10.0)
    seen: list[float] = []
    path = Path(clocks.offset_path("n2"))
    t = threading.Thread(target=lambda: clocks.strobe(["n2"], 100.0, 0.02, 0.3))
    t.start()
    while t.is_alive():
        seen.append(int(path.read_text()) / 1e9)
        time.sleep(0.005)
    t.join()
    assert {10.0, 110.0} <= set(seen)
    assert clocks.offset_s("n2") == 10.0 and int(path.read_text()) == 10 * 10**9
    with pytest.raises(ClusterError, match="period"):
        clocks.strobe("n2", 1.0, 0.001, 1.0)


def test_reset_all_stops_a_running_strobe_and_is_idempotent(clocks: ClockControl) -> None:
    t = threading.Thread(target=lambda: clocks.strobe(["n1", "n2"], 50.0, 0.02, 30.0))
    t.start()
    time.sleep(0.1)
    clocks.reset_all()
    t.join(timeout=2)
    assert not t.is_alive()
    clocks.reset_all()
    for n in ("n1", "n2"):
        assert int(Path(clocks.offset_path(n)).read_text()) == 0


def test_clock_nemesis_ops(clocks: ClockControl) -> None:
    nem = ClockNemesis(clocks)
    assert nem.invoke(NemesisOp("bump", {"nodes": ["n1"], "delta_s": 30})) == {
        "offset_s": {"n1": 30.0}
    }
    # 0.5 s at 20 ms: at least two flips even when the suite beside it starves this thread
    res = nem.invoke(NemesisOp("strobe", {"delta_s": 5, "period_s": 0.02, "duration_s": 0.5}))
    assert res["nodes"] == ["n1", "n2"] and res["flips"] >= 2
    assert clocks.offset_s("n1") == 30.0
    nem.heal()
    assert clocks.offset_s("n1") == 0.0
    with pytest.raises(ClusterError):
        nem.invoke(NemesisOp("warp"))


def test_env_for_works_for_any_node_before_setup(tmp_path: Path) -> None:
    """The controller asks for env_for(node) while the service starts, with no node list."""
    c = ClockControl(tmp_path / "clock", cache_dir=tmp_path / "cache")
    c.reset_all()  # nothing known yet: a no-op
    env = c.env_for("late")
    assert env["FC_CLOCK_OFFSET_FILE"] == str(tmp_path / "clock" / "late.offset")
    assert Path(env["LD_PRELOAD"]).exists()
    assert Path(env["FC_CLOCK_OFFSET_FILE"]).read_text() == "0\n"
    c.bump("late", 5)
    assert c.known_nodes() == ["late"]
    assert _py_time(env) - time.time() == pytest.approx(5, abs=2)
    c.reset_all()
    assert Path(env["FC_CLOCK_OFFSET_FILE"]).read_text() == "0\n"


def test_start_and_stop_clock_follow_the_seeded_schedule(tmp_path: Path) -> None:
    c = ClockControl(tmp_path / "clock", cache_dir=tmp_path / "cache")
    servers = [f"n{i}" for i in range(1, 6)]
    for n in servers:
        c.env_for(n)
    nem = ClockNemesis(c, servers, lease_ms=2000, rng=random.Random(1))
    kinds: list[str] = []
    try:
        for _ in range(12):
            res = nem.invoke(NemesisOp("start-clock", {"holder": None, "clients": []}))
            kinds.append(res["kind"])
            if res["kind"] == "strobe":
                assert len(res["nodes"]) == 3 and res["delta_s"] > 2.0
                time.sleep(0.02)
            else:
                offsets = res["offset_s"]
                assert len(offsets) in (1, 3)
                assert all(abs(v) > 2.0 for v in offsets.values())  # more than the lease
                if len(offsets) == 3:
                    assert all(v > 0 for v in offsets.values())  # a majority jumps forward
            nem.invoke(NemesisOp("stop-clock"))
            assert all(c.offset_s(n) == 0 for n in servers)
            assert all(Path(c.offset_path(n)).read_text() == "0\n" for n in servers)
    finally:
        nem.heal()
    assert "bump" in kinds and "strobe" in kinds
    assert kinds == _replay_kinds(tmp_path)  # same seed, same schedule


def _replay_kinds(tmp_path: Path) -> list[str]:
    c = ClockControl(tmp_path / "clock2", cache_dir=tmp_path / "cache")
    nem = ClockNemesis(c, [f"n{i}" for i in range(1, 6)], rng=random.Random(1))
    out = []
    for _ in range(12):
        out.append(nem.invoke(NemesisOp("start-clock"))["kind"])
        nem.invoke(NemesisOp("stop-clock"))
    return out


@pytest.mark.skipif(shutil.which("java") is None, reason="needs java")
def test_java_sees_the_offset(clocks: ClockControl, tmp_path: Path) -> None:
    src = tmp_path / "Now.java"
    src.write_text(
        "public class Now { public static void main(String[] a) {"
        " System.out.println(System.currentTimeMillis()); } }"
    )
    clocks.bump("n1", 3600.0)
    out = subprocess.run(
        ["java", str(src)],
        env={**os.environ, **clocks.env_for("n1")},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert int(out.stdout) / 1000 - time.time() == pytest.approx(3600, abs=30)
