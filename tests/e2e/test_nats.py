"""End to end on the `nats` backend (a 3-server JetStream cluster, the `nats` KV client) through
`fencecheck run`: unfenced with pauses past the lease it must find the damage; fenced by the
key's revision under the same pauses it must find nothing; and the revisions granted on a lock
strictly increase. The same twins with the Go nats.go client (`nats-go`, a shipped program).
Short runs (15 s), fixed seeds, the two runs side by side."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

from fencecheck.clusters.services import nats_build
from tests.conftest import at_once, run_fencecheck
from tests.e2e.test_run_backends import DAMAGE, kinds, must_find, run

pytestmark = [pytest.mark.netns, pytest.mark.usefixtures("no_leftovers")]

PAUSE = ("--backend", "nats", "--nemesis", "pause", "--time-limit", "15", "--lease-ms", "2000")


@pytest.fixture(autouse=True)
def built() -> None:
    try:
        nats_build.binary()
    except nats_build.NotBuilt as e:
        pytest.fail(str(e))  # the README's test command builds it: not a skip


def granted_tokens(store: Path, name: str) -> dict[str, list[int]]:
    """Each lock's granted tokens, in the order the grants were recorded."""
    run_dir = (store / name / "latest").resolve()
    out: dict[str, list[int]] = defaultdict(list)
    for line in (run_dir / "history.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e.get("f") == "acquire" and e.get("type") == "ok":
            out[e["value"]["lock"]].append(e["value"]["token"])
    return out


@pytest.mark.parametrize("client", ["nats", "nats-go"])
def test_unfenced_pauses_are_caught_and_fenced_by_revision_pass(tmp_path: Path,
                                                                client: str) -> None:
    # Twins side by side; not the two clients' four runs at once: four clusters starting
    # together beside the parallel suite did not all get healthy in 40 s.
    args = ("--client", client, *PAUSE)
    (code_u, res_u), (code_f, res_f) = at_once(
        lambda: run(tmp_path, "unfenced-1", "--seed", "1", "--fencing", "off", *args),
        lambda: run(tmp_path, "fenced", "--seed", "1", "--fencing", "on", *args))
    # Fenced: the store refuses the paused holder's stale revision; nothing to find.
    assert code_f == 0, kinds(res_f)
    assert res_f["checks"]["fencing"].get("skipped") is None  # the revisions were judged
    assert "token-regression" not in kinds(res_f)
    for lock, tokens in granted_tokens(tmp_path, "fenced").items():
        assert len(tokens) > 5, (lock, tokens)
        assert len(set(tokens)) == len(tokens), (lock, tokens)  # one revision, one grant
    # Unfenced: the paused holder's lease ran out, the next holder wrote, then it did too.
    if not (code_u == 1 and kinds(res_u) & DAMAGE):
        must_find(tmp_path, "unfenced", DAMAGE - {"double-grant"}, "--fencing", "off", *args,
                  seeds=(2,))
    else:
        assert "double-grant" not in kinds(res_u)  # the server grants one key once (v2.15)
        assert "token-regression" not in kinds(res_u)


def test_no_built_server_and_other_runtimes_are_refused_up_front(tmp_path: Path) -> None:
    unbuilt, docker = at_once(
        lambda: run_fencecheck("run", "--store", str(tmp_path), "--backend", "nats", timeout=60,
                               env={**os.environ,
                                    "FENCECHECK_CLIENT_CACHE": str(tmp_path / "empty-cache")}),
        lambda: run_fencecheck("run", "--store", str(tmp_path), "--backend", "nats",
                               "--runtime", "docker", timeout=60))
    assert unbuilt.returncode == 3, unbuilt.stdout + unbuilt.stderr
    assert "Traceback" not in unbuilt.stderr
    assert nats_build.BUILD_HINT in unbuilt.stderr and "not built" in unbuilt.stderr
    assert docker.returncode == 3, docker.stderr
    assert "does not run under --runtime docker" in docker.stderr
