"""A run made by the real controller with in-memory parts (tests/fencecheck/fakes.py): its
test.json and results.json are what the current writer writes, without root or servers."""

from __future__ import annotations

from pathlib import Path

import pytest

from fencecheck.run import controller
from fencecheck.run.config import make_config
from tests.conftest import REPO
from tests.fencecheck.fakes import Calls, fake_parts

DATA = REPO / "tests" / "data"
RUNS = sorted(p.parent for p in (DATA / "runs").glob("*/test.json"))


@pytest.fixture(scope="module")
def written_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("store")
    cfg = make_config(nemesis=("pause",), time_limit_s=0.6, concurrency=2, store=store,
                      nemesis_interval_s=(0.05, 0.1), pause_target="random")
    return controller.run(cfg, parts=fake_parts(Calls())).run_dir
