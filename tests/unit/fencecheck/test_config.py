"""Bad configuration is refused with one clear line naming the field, exit code 3."""

from __future__ import annotations

from pathlib import Path

import pytest

from fencecheck.run.config import ConfigError, make_config
from tests.conftest import run_fencecheck


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--backend", "mongodb"], "backend"),
        (["--time-limit", "0"], "--time-limit"),  # the option as typed, not time_limit_s
        (["--lease-ms", "0"], "--lease-ms"),
        (["--concurrency", "0"], "--concurrency"),
        (["--nemesis", "pause,meteor"], "nemesis"),
        (["--fencing", "maybe"], "fencing"),
        (["--backend", "redis", "--client", "zookeeper"], "client"),
    ],
)
def test_bad_option_exits_3_with_one_line(args: list[str], field: str, tmp_path: Path) -> None:
    r = run_fencecheck("run", "--store", str(tmp_path), *args, timeout=60)
    assert r.returncode == 3, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, r.stderr
    assert field in lines[0]
    assert "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == []  # nothing was started or recorded


def test_store_that_is_a_file_exits_3(tmp_path: Path) -> None:
    f = tmp_path / "store"
    f.write_text("not a directory")
    r = run_fencecheck("run", "--store", str(f), timeout=60)
    assert r.returncode == 3
    assert "store" in r.stderr and "not a directory" in r.stderr
    assert f.read_text() == "not a directory"


def test_config_defaults_and_names() -> None:
    cfg = make_config(backend="etcd", fencing=True, nemesis=("pause", "partition"))
    assert cfg.client_name == "etcd" and cfg.node_count == 3
    assert cfg.test_name == "etcd-etcd-pause+partition-fenced"
    lo, _ = cfg.pause_duration_s
    assert lo > cfg.lease_ms / 1000  # default pauses outlast the lease
    with pytest.raises(ConfigError, match="nemesis"):
        make_config(nemesis=("none", "pause"))


def test_a_backend_refuses_more_nodes_than_it_runs_on(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nodes: postgres-advisory runs on at most 1 node"):
        make_config(backend="postgres-advisory", nodes=3, store=tmp_path / "store")
    assert make_config(backend="postgres-advisory", store=tmp_path / "store").node_count == 1
