"""benchmarks/bench_checker.py, the measure of issue 25's checker-speed goal: it runs on a small
history and reports what the goal is judged by (the ratio, peak RSS, the load average beside
them), and it reads cachegrind's totals as printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from benchmarks import bench_checker
from tests.conftest import REPO

HISTORY = REPO / "examples" / "histories" / "etcd-fenced.jsonl"

# what valgrind 3.19's cachegrind prints on stderr with --cache-sim=yes (its summary lines)
CACHEGRIND_STDERR = """==1== I   refs:      1,436,003,549
==1== I1  misses:          812,345
==1== LLi misses:           12,345
==1== I1  miss rate:          0.06%
==1== D   refs:        612,345,678  (401,234,567 rd   + 211,111,111 wr)
==1== D1  misses:        9,876,543  (  7,654,321 rd   +   2,222,222 wr)
==1== LLd misses:        1,234,567  (  1,000,000 rd   +     234,567 wr)
"""


def test_a_run_reports_the_ratio_memory_and_load() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_checker.py"),
                          "--repeat", "1", "--json", str(HISTORY)],
                         capture_output=True, text=True, check=True, env=env, timeout=120)
    row = json.loads(out.stdout)
    assert row["events"] == sum(1 for _ in HISTORY.open()) and row["ops"] > 0
    assert row["valid"] is True and row["ratio"] > 0
    assert row["ratio_with_imports"] >= row["ratio"]
    assert row["check_maxrss_mb"] > 0 and len(row["load_average"]) == 2


def test_cachegrind_totals_are_read() -> None:
    found = {f"{a} {b}": int(n.replace(",", ""))
             for a, b, n in bench_checker._CACHEGRIND.findall(CACHEGRIND_STDERR)}
    assert found["I refs"] == 1_436_003_549
    assert found["D1 misses"] == 9_876_543 and found["LLd misses"] == 1_234_567
    assert found["I1 misses"] == 812_345 and found["LLi misses"] == 12_345
