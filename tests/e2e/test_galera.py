"""End to end through `fencecheck run`: the lock table on a 3-node Galera cluster (`--backend
galera`), each worker writing through its own node. What was measured over 10 seeds is in the
README; here, one seed each, side by side: no faults, and partitions unfenced."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import at_once
from tests.e2e.test_run_backends import kinds, run

pytestmark = [pytest.mark.netns, pytest.mark.usefixtures("no_leftovers")]

GALERA = ("--backend", "galera", "--lease-ms", "2000", "--seed", "1")


def test_lock_table_without_faults_and_under_partitions_is_valid(tmp_path: Path) -> None:
    (calm_code, calm), (cut_code, cut) = at_once(
        lambda: run(tmp_path, "galera-none", *GALERA, "--nemesis", "none", "--time-limit", "12"),
        lambda: run(tmp_path, "galera-partition", *GALERA, "--nemesis", "partition",
                    "--fencing", "off", "--time-limit", "15"),
    )
    assert calm_code == 0, kinds(calm)
    assert calm["stats"]["ops_by_f"]["acquire"]["ok"] > 0
    assert cut_code == 0, kinds(cut)
    assert cut["stats"]["ops_by_f"]["acquire"]["ok"] > 0
