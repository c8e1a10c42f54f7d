"""The example histories shipped in examples/histories/ give the verdicts their names promise,
and the generator still makes them byte for byte (so they can be regenerated, not hand-patched)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.gen_history import EXAMPLES, write_examples
from fencecheck.checker.analyze import analyze
from fencecheck.checker.history import load_ops
from tests.conftest import REPO

EXAMPLE_DIR = REPO / "examples" / "histories"


def test_redis_unfenced_has_a_stale_write_accepted() -> None:
    results = analyze(load_ops(EXAMPLE_DIR / "redis-unfenced.jsonl"))
    assert results.valid is False
    kinds = {v.kind for c in results.checks.values() for v in c.violations}
    assert "stale-write-accepted" in kinds and "lost-update" in kinds
    assert results.stats["nemesis_ops_by_f"]["start-pause"] >= 1


def test_etcd_fenced_is_valid_and_the_fence_rejected_a_write() -> None:
    results = analyze(load_ops(EXAMPLE_DIR / "etcd-fenced.jsonl"))
    assert results.valid is True
    assert results.stats["writes_rejected_by_fence"] >= 1


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_generator_reproduces_example(tmp_path: Path, name: str) -> None:
    write_examples(tmp_path)
    assert (tmp_path / f"{name}.jsonl").read_bytes() == (EXAMPLE_DIR / f"{name}.jsonl").read_bytes()
