"""End to end through `fencecheck run`: MariaDB `GET_LOCK` (`--backend mariadb`), must-find and
must-not. A real mariadbd in a network namespace, short runs, fixed seeds (the must-find may try a
second seed).

The holder's critical section (4 writes, 700 ms apart) outlasts the server's detection of a cut-off
client (keepalive after a lease of silence, about 2 s for a 1 s lease), so its writes go on while
the next worker holds the lock; the same section without faults is valid, since a holder whose
host answers the keepalive keeps its session, and with it the lock."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import at_once
from tests.e2e.test_run_backends import DAMAGE, kinds, must_find, run

pytestmark = [pytest.mark.netns, pytest.mark.usefixtures("no_leftovers")]

LONG_SECTION = ("--backend", "mariadb", "--lease-ms", "1000", "--think-ms", "700", "--writes",
                "4", "--time-limit", "15")
WANTED = DAMAGE - {"double-grant"}


def test_get_lock_holder_cut_off_is_caught_unless_the_counter_fences_it(tmp_path: Path) -> None:
    (code, found), (fenced_code, fenced) = at_once(
        lambda: run(tmp_path, "mdb-partition-1", "--seed", "1", "--nemesis", "partition",
                    "--fencing", "off", *LONG_SECTION),
        lambda: run(tmp_path, "mdb-counter", "--seed", "1", "--client",
                    "mariadb-get-lock-counter", "--nemesis", "partition", "--fencing", "on",
                    *LONG_SECTION),
    )
    assert fenced_code == 0, kinds(fenced)
    assert fenced["checks"]["fencing"].get("skipped") is None  # tokens were there to judge
    if not (code == 1 and kinds(found) & WANTED):
        must_find(tmp_path, "mdb-partition", WANTED, "--nemesis", "partition", "--fencing",
                  "off", *LONG_SECTION, seeds=(2,))


def test_no_faults_is_valid(tmp_path: Path) -> None:
    clients = ("mariadb-get-lock", "mariadb-get-lock-counter")
    runs = at_once(*(
        (lambda c=c: run(tmp_path, c, "--backend", "mariadb", "--client", c, "--nemesis", "none",
                         "--seed", "1", *LONG_SECTION[2:]))
        for c in clients))
    for client, (code, results) in zip(clients, runs, strict=True):
        assert code == 0, (client, kinds(results))
        assert results["stats"]["ops_by_f"]["acquire"]["ok"] > 0, client
