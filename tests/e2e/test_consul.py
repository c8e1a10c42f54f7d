"""End to end on the `consul` backend (3 Consul servers) through `fencecheck run`:
- the Go `api.Lock` client (`consul-go`) with holders paused past the session's TTL: with
  lock-delay 0, unfenced, the damage is found; fenced by the key's ModifyIndex, nothing is; with
  Consul's default lock-delay (15 s, longer than any pause here) nothing is either, and the
  tokens granted on a lock strictly increase. Short runs (15 s), fixed seeds, side by side.
- `consul lock` (`consul-lock`), whose child does the writes, its holder's node cut off from the
  servers: the child goes on writing after the servers gave the lock to another holder. This
  run is long (60 s): `consul lock` fixes its session's TTL at 15 s, which a server lets lapse
  only after twice that, and the lock-delay at 15 s."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

from fencecheck.clusters.services import consul_build
from tests.backends import consul_binary
from tests.conftest import at_once, run_fencecheck
from tests.e2e.test_run_backends import DAMAGE, kinds, must_find, run

# On a fresh machine the first test waits for consul's build, which the README's test command
# runs beside the tests (about 10 CPU minutes): the time limit covers that wait.
LATE_BUILD = pytest.mark.timeout(1800)
pytestmark = [pytest.mark.netns, pytest.mark.usefixtures("no_leftovers"), LATE_BUILD]

PAUSE = ("--backend", "consul", "--client", "consul-go", "--nemesis", "pause",
         "--time-limit", "15", "--lease-ms", "2000", "--concurrency", "4")


@pytest.fixture(autouse=True)
def built() -> None:
    consul_binary()  # the README's test command builds it (beside the tests): not a skip


def granted_tokens(store: Path, name: str) -> dict[str, list[int]]:
    """Each lock's granted tokens, in the order the grants were recorded."""
    run_dir = (store / name / "latest").resolve()
    out: dict[str, list[int]] = defaultdict(list)
    for line in (run_dir / "history.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e.get("f") == "acquire" and e.get("type") == "ok":
            out[e["value"]["lock"]].append(e["value"]["token"])
    return out


CUT_OFF = ("--backend", "consul", "--client", "consul-lock", "--nemesis", "partition",
           "--fencing", "off", "--lease-ms", "2000", "--concurrency", "3", "--writes", "1000",
           "--think-ms", "50", "--fault-duration", "60,60", "--time-limit", "60")


def test_pauses_past_the_ttl_and_a_cut_off_consul_lock(tmp_path: Path) -> None:
    """Four runs side by side (the long consul-lock run sets the time): the Go client's three
    pause runs, and consul lock's holder cut off."""
    no_delay = ("--client-opt", "lock_delay_ms=0")
    (code_u, res_u), (code_f, res_f), (code_d, res_d), (code_c, res_c) = at_once(
        lambda: run(tmp_path, "unfenced-1", "--seed", "1", "--fencing", "off", *no_delay,
                    *PAUSE),
        lambda: run(tmp_path, "fenced", "--seed", "1", "--fencing", "on", *no_delay, *PAUSE),
        lambda: run(tmp_path, "delayed", "--seed", "1", "--fencing", "off", *PAUSE),
        lambda: run(tmp_path, "cut-off", "--seed", "2", *CUT_OFF, timeout=400))
    # Fenced: the store refuses the paused holder's stale ModifyIndex; nothing to find.
    assert code_f == 0, kinds(res_f)
    assert res_f["checks"]["fencing"].get("skipped") is None  # the tokens were judged
    for lock, tokens in granted_tokens(tmp_path, "fenced").items():
        assert len(tokens) > 3, (lock, tokens)
        assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens), (lock, tokens)
    # Consul's default lock-delay (15 s) keeps the key from everyone for longer than the pause.
    assert code_d == 0, kinds(res_d)
    # consul lock: seed 2 cuts the first holder's node off from the three servers. Its session
    # lapses after 2 x 15 s without renewal, the next holder is granted the lock after the 15 s
    # lock-delay, and consul lock, whose watch of the key waits on a connection to a server it
    # cannot reach, has not stopped its child: the child's next write lands after the new
    # holder's.
    assert code_c == 1 and "interleaved-writes" in kinds(res_c), kinds(res_c)
    assert "double-grant" not in kinds(res_c)
    run_dir = (tmp_path / "cut-off" / "latest").resolve()
    shapes = [json.loads(line)["value"].get("shape")
              for line in (run_dir / "history.jsonl").read_text().splitlines()
              if '"start-partition"' in line and '"ok"' in line]
    assert shapes[:1] == ["client-isolate"], shapes
    # Unfenced, lock-delay 0: the paused holder's session lapsed, the next holder wrote, and so
    # did the resumed one.
    if not (code_u == 1 and kinds(res_u) & DAMAGE):
        must_find(tmp_path, "unfenced", DAMAGE - {"double-grant"}, "--fencing", "off",
                  *no_delay, *PAUSE, seeds=(2,))
    else:
        assert "double-grant" not in kinds(res_u)


def test_no_built_server_and_other_runtimes_are_refused_up_front(tmp_path: Path) -> None:
    unbuilt, docker, long_lease = at_once(
        lambda: run_fencecheck("run", "--store", str(tmp_path), "--backend", "consul",
                               timeout=60, env={**os.environ, "FENCECHECK_CLIENT_CACHE":
                                                str(tmp_path / "empty-cache")}),
        lambda: run_fencecheck("run", "--store", str(tmp_path), "--backend", "consul",
                               "--runtime", "docker", timeout=60),
        lambda: run_fencecheck("run", "--store", str(tmp_path), "--backend", "consul",
                               "--client", "consul-lock", "--lease-ms", "20000", timeout=60))
    assert unbuilt.returncode == 3, unbuilt.stdout + unbuilt.stderr
    assert "Traceback" not in unbuilt.stderr
    assert consul_build.BUILD_HINT in unbuilt.stderr and "not built" in unbuilt.stderr
    assert docker.returncode == 3, docker.stderr
    assert "does not run under --runtime docker" in docker.stderr
    assert long_lease.returncode == 3, long_lease.stderr
    assert "session TTL is fixed at 15000 ms" in long_lease.stderr
