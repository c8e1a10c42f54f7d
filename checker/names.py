"""One name per process, the same in the report, the CLI and results: `p4 (node c5)`.

A run folder says which worker ran on which client node (`nodes/<node>/worker.json`: `worker`,
`concurrency`, `process_base`). A worker's process id is `process_base + worker + concurrency ×
generation` (a new generation after each `info`, see `workloads.worker`), so the worker, and with
it the node, follows from the id alone. The final read runs with `process_base` 1,000,000
(`fencecheck.records.history.FINAL_READ_PROCESS_BASE`) and is named as such. Pure: reads the run
folder, runs nothing. Here in `checker` so that the report, the CLI and results can all use it
(imports go one way, to `checker`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msgspec import UNSET

from fencecheck.records import test as test_record
from fencecheck.records.base import RecordError
from fencecheck.records.history import FINAL_READ_PROCESS_BASE

FINAL_READ_BASE = FINAL_READ_PROCESS_BASE  # the name the reports and tests know


@dataclass(frozen=True, slots=True)
class ProcessNames:
    """Maps a history's process ids to workers and client nodes."""

    concurrency: int | None = None
    node_of_worker: Mapping[int, str] = field(default_factory=dict)

    def worker(self, process: Any) -> int | None:
        """The worker (0-based) that ran process, or None (nemesis, final read, unknown)."""
        if not isinstance(process, int) or isinstance(process, bool) or process < 0:
            return None
        if process >= FINAL_READ_BASE or not self.concurrency:
            return None
        return process % self.concurrency

    def node(self, process: Any) -> str | None:
        w = self.worker(process)
        return None if w is None else self.node_of_worker.get(w)

    def is_final_read(self, process: Any) -> bool:
        return isinstance(process, int) and not isinstance(process, bool) and (
            process >= FINAL_READ_BASE
        )

    def label(self, process: Any) -> str:
        """`p4 (node c5)`, `final read (p1000000)`, `nemesis`, or `p4` where no node is known."""
        if process == "nemesis":
            return "nemesis"
        if self.is_final_read(process):
            return f"final read (p{process})"
        node = self.node(process)
        return f"p{process} (node {node})" if node else f"p{process}"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def load_names(run_dir: Path) -> ProcessNames:
    """The process names of a run folder; without worker configs, plain `p<id>` names."""
    nodes: dict[int, str] = {}
    concurrency: int | None = None
    base = run_dir / "nodes"
    if base.is_dir():
        for conf_path in sorted(base.glob("*/worker.json")):
            conf = _read(conf_path)
            if conf is None or conf.get("process_base", 0) != 0:
                continue
            w, c = conf.get("worker"), conf.get("concurrency")
            if isinstance(w, int) and isinstance(c, int) and c > 0:
                nodes[w] = conf_path.parent.name
                concurrency = c
    if concurrency is None and (run_dir / "test.json").is_file():
        try:
            c = test_record.read(run_dir / "test.json").settings.concurrency
        except RecordError:  # names are a courtesy: a bad test.json is reported by its reader
            c = UNSET
        concurrency = c if c is not UNSET and c > 0 else None
    return ProcessNames(concurrency, nodes)


def legend(names: ProcessNames, processes: Iterable[Any]) -> str:
    """`p0 = node c1, p5 = node c1, p1000000 = final read`: for text that says "process 5"."""
    parts = []
    for p in sorted({p for p in processes if isinstance(p, int) and not isinstance(p, bool)}):
        if names.is_final_read(p):
            parts.append(f"p{p} = final read")
        elif (node := names.node(p)) is not None:
            parts.append(f"p{p} = node {node}")
    return ", ".join(parts)


def fault_target(value: Any) -> str:
    """What a fault hit, from the value the nemesis logged: `c5`, `c1, c2`, a partition's
    shape; empty where the nemesis did not say."""
    if not isinstance(value, dict):
        return ""
    for key in ("targets", "nodes", "node", "target"):
        t = value.get(key)
        if isinstance(t, list) and t:
            return ", ".join(map(str, t))
        if isinstance(t, str) and t:
            return t
    shape = value.get("shape")
    return str(shape) if isinstance(shape, str) else ""
