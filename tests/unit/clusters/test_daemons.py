"""A daemon that exits while the service waits for it: the error names the node, the log, and
quotes the log's last lines (the run's folder may be gone before anyone reads the file)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fencecheck.clusters.base import ClusterError
from fencecheck.clusters.runtimes.local import LocalRemote
from fencecheck.clusters.services.daemons import NodeDaemons


class _Service(NodeDaemons):
    name = "svc"

    def __init__(self) -> None:
        self.init_daemons(None, None, None, keep_data=False)


def _wait_exited(svc: _Service) -> None:
    deadline = time.monotonic() + 10
    while svc.running("n1"):
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_an_exited_daemon_is_reported_with_the_end_of_its_log(tmp_path: Path) -> None:
    svc = _Service()
    svc.adopt_nodes({"n1": LocalRemote("n1", "127.0.0.1")}, tmp_path)
    log = tmp_path / "nodes" / "n1" / "svc.log"
    lines = "; ".join(f"echo line{i}" for i in range(20))
    svc.start_node_daemon("n1", "svc", ["sh", "-c", f"{lines}; echo bind failed; exit 3"], log)
    _wait_exited(svc)
    with pytest.raises(ClusterError) as e:
        svc.check_exited(["n1"], "svc.log")
    msg = str(e.value)
    assert msg.startswith(f"svc on n1 exited; see {log}:\n")
    assert msg.endswith("  bind failed") and "  line19\n" in msg and "line5\n" not in msg
    svc.check_exited([], "svc.log")  # nothing asked, nothing raised


def test_an_unreadable_log_leaves_the_plain_message(tmp_path: Path) -> None:
    svc = _Service()
    svc.adopt_nodes({"n1": LocalRemote("n1", "127.0.0.1")}, tmp_path)
    svc.start_node_daemon("n1", "svc", ["true"], tmp_path / "elsewhere.log")
    _wait_exited(svc)
    with pytest.raises(ClusterError, match=r"^svc on n1 exited; see \S+/nodes/n1/svc.log$"):
        svc.check_exited(["n1"], "svc.log")
