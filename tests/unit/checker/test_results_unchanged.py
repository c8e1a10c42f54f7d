"""The verdict of every shipped history stays what it was: results.json of each (examples/histories,
tests/data/histories, tests/data/runs) equals its snapshot in tests/data/results-snapshot.jsonl,
so a change made for speed (checker/, records/history.py) cannot change a verdict, a count, an
explanation or the order of anything in the file.

What the snapshot leaves out: `tool_version` (the installed version) and the model check's
`elapsed_s` (a wall time). A check added after the snapshot was taken (and its entry in
`stats.violations`) is left out of the comparison, so that a new check module does not fail this
test; what it changes in the verdict, the incidents or the other checks still does.

After a change that is meant to change results: `FENCECHECK_SNAPSHOT=write pytest` on this file
rewrites the snapshot; its diff is then the change to review.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from fencecheck.checker.verdict import check_history
from fencecheck.records import results as results_record
from tests.conftest import REPO

SNAPSHOT = REPO / "tests" / "data" / "results-snapshot.jsonl"
HISTORIES = sorted(
    [*(REPO / "examples" / "histories").glob("*.jsonl"),
     *(REPO / "tests" / "data" / "histories").glob("*.jsonl"),
     *(REPO / "tests" / "data" / "runs").glob("*/history.jsonl")])
_ELAPSED = re.compile(rb'"elapsed_s":\s*[-0-9.eE+]+')


def results_document(path: Path) -> dict[str, Any]:
    """results.json of one history as the tool writes it, minus what changes run to run."""
    data = results_record.encode(check_history(path).record())
    doc: dict[str, Any] = json.loads(_ELAPSED.sub(b'"elapsed_s": 0', data))
    doc.pop("tool_version", None)
    return doc


def _name(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def _snapshot() -> dict[str, Any]:
    if not SNAPSHOT.exists():
        return {}
    lines = SNAPSHOT.read_text(encoding="utf-8").splitlines()
    return {name: doc for name, doc in map(json.loads, lines)}


def _without_new_checks(doc: dict[str, Any], known: dict[str, Any]) -> dict[str, Any]:
    new = set(doc.get("checks", {})) - set(known.get("checks", {}))
    if not new:
        return doc
    out = {**doc, "checks": {n: c for n, c in doc["checks"].items() if n not in new}}
    violations = doc.get("stats", {}).get("violations")
    if isinstance(violations, dict):
        out["stats"] = {**doc["stats"],
                        "violations": {n: c for n, c in violations.items() if n not in new}}
    return out


def test_every_shipped_history_has_a_snapshot() -> None:
    if os.environ.get("FENCECHECK_SNAPSHOT") == "write":
        SNAPSHOT.write_text("".join(json.dumps([_name(p), results_document(p)]) + "\n"
                                    for p in HISTORIES), encoding="utf-8")
    assert len(HISTORIES) >= 30
    assert sorted(_snapshot()) == [_name(p) for p in HISTORIES]


@pytest.mark.parametrize("path", HISTORIES, ids=_name)
def test_results_are_byte_identical_to_the_snapshot(path: Path) -> None:
    known = _snapshot().get(_name(path))
    if known is None:
        pytest.fail(f"{_name(path)}: no snapshot (FENCECHECK_SNAPSHOT=write, then review)")
    doc = _without_new_checks(results_document(path), known)
    # compared as the text the file holds: key order is part of what a reader sees
    assert json.dumps(doc, indent=1) == json.dumps(known, indent=1)
