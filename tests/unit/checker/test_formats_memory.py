"""Reading Jepsen EDN and Jepsen logs takes memory within 10x the input (tracemalloc's peak of
the Python heap while loading), for long strings, escape-heavy strings and many small ops."""

from __future__ import annotations

import random
import tracemalloc
from pathlib import Path

import pytest

from fencecheck.checker.formats import load_any

LIMIT = 10


def register_edn(n: int) -> str:
    rng = random.Random(3)
    out = []
    for i in range(n):
        f = rng.choice(["read", "write", "cas"])
        v = "nil" if f == "read" else str(rng.randrange(5)) if f == "write" \
            else f"[{rng.randrange(5)} {rng.randrange(5)}]"
        done = str(rng.randrange(5)) if f == "read" else v
        out.append(f"{{:type :invoke, :f :{f}, :value {v}, :process {i % 7}, :index {2 * i}}}")
        out.append(f"{{:type :ok, :f :{f}, :value {done}, :process {i % 7}, :index {2 * i + 1}}}")
    return "\n".join(out) + "\n"


def register_log(n: int) -> str:
    return "".join(f"INFO  jepsen.util - {(i // 2) % 7}\t:{'ok' if i % 2 else 'invoke'}\t:write"
                   f"\t{i % 5}\n" for i in range(2 * n))


def one_write(value: str) -> str:
    return f'{{:index 0, :time 0, :process 0, :type :invoke, :f :write, :value "{value}"}}\n'


@pytest.mark.parametrize(("fmt", "text"), [
    ("edn", register_edn(5000)),
    ("jepsen-log", register_log(5000)),
    ("edn", one_write("a" * 1_000_000)),
    ("edn", one_write("\\n" * 500_000)),
], ids=["edn-ops", "log-ops", "edn-long-string", "edn-escapes"])
def test_reading_takes_at_most_ten_times_the_input(tmp_path: Path, fmt: str, text: str) -> None:
    path = tmp_path / "history"
    path.write_text(text)
    tracemalloc.start()
    try:
        load_any(path, fmt)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= LIMIT * path.stat().st_size, f"{peak / path.stat().st_size:.1f}x the input"
