"""The pairing loop compiled from checker/_fastpair.c stands in for fastload's Python loop: built
from this very source, and reading every input as the Python loop does, mutants included (what a
crash or a different op would show first). test_fastload.py runs its tests with both loops."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest

from fencecheck.checker import fastload
from tests.conftest import REPO
from tests.unit.checker.test_fuzz import mutate, seeds

MUTANTS = 1500


def test_the_compiled_loop_is_of_this_source() -> None:
    from fencecheck.checker import _fastpair  # type: ignore[attr-defined]

    assert fastload.NATIVE is not None, "checker/_fastpair.c is not built (setup.py)"
    source = (REPO / "checker" / "_fastpair.c").read_bytes()
    assert hashlib.sha256(source).hexdigest()[:16] == _fastpair.SOURCE_DIGEST


def test_a_build_of_another_source_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    from fencecheck.checker import _fastpair  # type: ignore[attr-defined]

    assert fastload._native() is not None
    monkeypatch.setattr(_fastpair, "SOURCE_DIGEST", "0" * 16)
    assert fastload._native() is None


def test_mutants_read_the_same_with_both_loops(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Bytes flipped, inserted, deleted, lines swapped, repeated, cut, fields of the wrong type
    (test_fuzz's mutants): each loop gives the same ops, or both hand the file to the exact
    reader (None); none raises. Blocks of 100 bytes, so lines cross block boundaries."""
    rng = random.Random(20261204)
    base = seeds()
    monkeypatch.setattr(fastload, "_BLOCK", 100)
    native = fastload.NATIVE
    outcomes = {"ops": 0, "irregular": 0}
    for n in range(MUTANTS):
        data = mutate(rng, rng.choice(base), structural=True)
        path = tmp_path / f"m{n}.jsonl"
        path.write_bytes(data)
        monkeypatch.setattr(fastload, "NATIVE", native)
        compiled = fastload.fast_ops(path)
        monkeypatch.setattr(fastload, "NATIVE", None)
        python = fastload.fast_ops(path)
        assert compiled == python, (n, data[:300])
        outcomes["irregular" if python is None else "ops"] += 1
    assert min(outcomes.values()) > MUTANTS // 10, outcomes  # both ways taken, often
