"""checker.linear against reference histories with known verdicts from Porcupine and Knossos.

The corpus lives beside the repository (`../shared/corpus`, see its README) and is never copied
in; the cases skip with a reason where it is absent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fencecheck.checker.formats import load_any
from fencecheck.checker.linear import check_linearizable
from tests.conftest import REPO

CORPUS = REPO.parent / "shared" / "corpus"
# Porcupine's own tests: these etcd histories are linearizable, every other one is not.
ETCD_VALID = {2, 5, 7, 18, 25, 31, 38, 45, 48, 49, 51, 53, 56, 67, 75, 76, 80, 87, 92, 98, 100,
              101, 102}


def _cases() -> list[object]:
    if not CORPUS.is_dir():
        return [pytest.param(None, "", False, marks=pytest.mark.skip(
            reason=f"reference corpus {CORPUS} is absent"), id="corpus-absent")]
    cases: list[object] = []
    for i in range(103):
        if i == 95:
            continue  # etcd_095.log is empty: that Jepsen run's cluster never started
        path = CORPUS / "porcupine" / "jepsen" / f"etcd_{i:03d}.log"
        cases.append(pytest.param(path, "cas-register", i in ETCD_VALID, id=path.stem))
    for verdict, valid in (("good", True), ("bad", False)):
        for path in sorted((CORPUS / "knossos" / "cas-register" / verdict).glob("*.edn")):
            cases.append(pytest.param(path, "cas-register", valid, id=f"{verdict}/{path.stem}"))
    cases.append(pytest.param(CORPUS / "knossos" / "mutex" / "bad" / "etcd.edn", "mutex", False,
                              id="mutex/etcd"))
    return cases


@pytest.mark.parametrize(("path", "model", "valid"), _cases())
def test_reference_verdict(path: Path, model: str, valid: bool) -> None:
    result = check_linearizable(load_any(path), model, time_limit_s=60)
    assert result.valid is valid, result.to_json()
    if not valid:
        (v,) = result.violations
        assert v.kind == "not-linearizable"
        assert isinstance(v.extra["failed_op"], int)
        assert v.explanation.endswith(".") and "\n" not in v.explanation
