"""The run ledger and the standalone cleaner: `Ledger`, `teardown_run`, `teardown_all`.

Every resource a run creates (namespace, veth, iptables chain, process) is recorded in the run's
ledger *before* it is created, so that after a crash a cleaner that holds no live object can
remove exactly those resources by their recorded names, and nothing else (Mininet's clean.py
idea, but by recorded names rather than by pattern-matching everything on the machine).

The ledger is an append-only JSONL file, one `{"kind", "name", ...}` object a line, fsync'd per
record. Each run also registers itself in a global index directory (`/run/fencecheck/runs/<run>`,
a file holding the ledger's path), so `fencecheck teardown` finds killed runs without knowing
their store. Processes started for a run also carry `FENCECHECK_RUN=<run>` in their environment
(`Ledger.env()`), which closes the window between starting a process and recording its pid
for processes that keep their environment (redis-server does not: it reuses the environ block
for its process title, so it is found by its recorded pid, or with its namespace).

The ledger's first record names its owner (the controller's pid and start time): `teardown_all`
skips runs whose owner is still alive, so `fencecheck teardown --all` never pulls the network
from under a test running in another terminal (`force=True` does).

Teardown undoes records in reverse order (LIFO: processes, then chains, then node namespaces,
then the switch namespace), treats "already gone" as success, and gathers every error and raises
them together at the end (pytest SetupState style) rather than stopping at the first.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fencecheck.clusters.base import ClusterError
from fencecheck.clusters.reaper import ENV_MARKER as ENV_MARKER
from fencecheck.clusters.reaper import NETNS_DIR as NETNS_DIR
from fencecheck.clusters.reaper import NETNS_NAME_RE as NETNS_NAME_RE
from fencecheck.clusters.reaper import _start_time as _start_time
from fencecheck.clusters.reaper import delete_netns as delete_netns
from fencecheck.clusters.reaper import kill_pids as kill_pids
from fencecheck.clusters.reaper import marked_pids as marked_pids
from fencecheck.clusters.reaper import netns_pids as netns_pids
from fencecheck.clusters.reaper import run_namespaces as run_namespaces

log = logging.getLogger(__name__)

RUN_INDEX = Path("/run/fencecheck/runs")
RUN_ID_RE = re.compile(r"^[0-9a-z]{1,8}$")

Record = Mapping[str, Any]


class TeardownError(ClusterError):
    """One or more resources could not be removed; `errors` holds every message."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__(f"teardown left {len(errors)} problem(s): " + "; ".join(errors))
        self.errors = errors


def claim_run_id(index: Path = RUN_INDEX, make: Callable[[], str] | None = None) -> str:
    """A run id no other run on this machine holds: its index entry is created with O_EXCL (the
    machine-wide lock), before anything of the run exists. Two runs started at once, by a
    matrix with --jobs or a parallel test suite, can never share an id and so never a name."""
    import secrets

    make = make or (lambda: secrets.token_hex(3))
    index.mkdir(parents=True, exist_ok=True)
    for _ in range(100):
        run_id = check_run_id(make())
        try:
            os.close(os.open(index / run_id, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            continue
        return run_id
    raise ClusterError(f"no free run id in {index} after 100 tries")


def release_run_id(run_id: str, index: Path = RUN_INDEX) -> None:
    """Give back a claimed id that no ledger was recorded under (the run stopped before its
    runtime made anything); an entry naming a ledger stays for the cleaner."""
    entry = index / run_id
    with contextlib.suppress(FileNotFoundError):
        if not entry.read_text().strip():
            entry.unlink()


def check_run_id(run_id: str) -> str:
    if not RUN_ID_RE.match(run_id):
        raise ClusterError(f"bad run id {run_id!r}: want 1-8 characters of [0-9a-z]")
    return run_id


class Ledger:
    """Append-only record of what a run created. Safe to share between objects of one run:
    every record is one O_APPEND write, so concurrent writers never interleave lines."""

    def __init__(self, path: Path, run_id: str, index: Path = RUN_INDEX) -> None:
        self.path = path
        self.run_id = check_run_id(run_id)
        self.index = index
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(exist_ok=True)
        index.mkdir(parents=True, exist_ok=True)
        entry = index / run_id
        known = entry.read_text().splitlines() if entry.exists() else []
        if str(path.resolve()) not in known:
            with open(entry, "a") as f:
                f.write(f"{path.resolve()}\n")
                f.flush()
                os.fsync(f.fileno())
        # Who runs this run: `teardown_all` leaves runs alone whose owner is still alive.
        me = os.getpid()
        self.record("owner", "controller", pid=me, start=_start_time(me))

    def record(self, kind: str, name: str, **fields: Any) -> None:
        """Append one record and fsync it; call this before creating the resource."""
        line = json.dumps({"kind": kind, "name": name, "run": self.run_id, **fields}) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        log.debug("ledger %s: %s %s %s", self.run_id, kind, name, fields)

    def record_process(self, node: str, name: str, pid: int) -> None:
        """Record a started process with its start time, so a reused pid is never killed."""
        self.record("process", name, node=node, pid=pid, start=_start_time(pid))

    def env(self) -> dict[str, str]:
        """Environment to give every process of the run, so the cleaner can find it by marker."""
        return {ENV_MARKER: self.run_id}

    def records(self) -> list[dict[str, Any]]:
        return read_records(self.path)

    def unregister(self) -> None:
        """Drop the run from the global index, once everything it made is gone. The ledger
        file itself stays in the store, as evidence of what the run made."""
        with contextlib.suppress(FileNotFoundError):
            (self.index / self.run_id).unlink()


def read_records(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    with contextlib.suppress(FileNotFoundError), open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                # A crash mid-write can leave a torn last line; everything before it is good.
                log.warning("ledger %s: skipping torn line %r", path, line[:80])
    return out


# ---------------------------------------------------------------------------------------------
# Undo of one record. Each returns a description of what it removed, or None if already gone.

UndoFn = Callable[[Mapping[str, Any]], "str | None"]
_UNDO: dict[str, UndoFn] = {}


def register_undo(kind: str, fn: UndoFn) -> None:
    """Teach the cleaner how to remove records of a new kind (e.g. a Docker container)."""
    _UNDO[kind] = fn


def _undo_netns(rec: Mapping[str, Any]) -> str | None:
    name = str(rec["name"])
    return f"netns {name}" if delete_netns([name]) else None


def _undo_process(rec: Mapping[str, Any]) -> str | None:
    pid = int(rec["pid"])
    if rec.get("start") is None or _start_time(pid) != rec["start"]:
        return None  # gone, or the pid now belongs to someone else
    kill_pids([pid])
    return f"process {rec['name']} on {rec.get('node', '?')} (pid {pid})"


def _undo_chain(rec: Mapping[str, Any]) -> str | None:
    ns = rec.get("ns")
    if ns is not None and not (NETNS_DIR / str(ns)).exists():
        return None  # the chain went with its namespace
    prefix = ["ip", "netns", "exec", str(ns)] if ns is not None else []
    chain = str(rec["name"])
    exists = subprocess.run([*prefix, "iptables", "-w", "-n", "-L", chain], capture_output=True)
    if exists.returncode != 0:
        return None
    for args in (["-D", "INPUT", "-j", chain], ["-F", chain], ["-X", chain]):
        # -D fails if the jump is already gone; -F/-X must succeed.
        res = subprocess.run([*prefix, "iptables", "-w", *args], capture_output=True, text=True)
        if res.returncode != 0 and args[0] != "-D":
            raise ClusterError(f"iptables {' '.join(args)} in {ns}: {res.stderr.strip()}")
    return f"chain {chain} in {ns or 'host'}"


def _undo_veth(rec: Mapping[str, Any]) -> str | None:
    ns = str(rec.get("ns", ""))
    if not (NETNS_DIR / ns).exists():
        return None  # a veth dies with its namespace
    res = subprocess.run(["ip", "-n", ns, "link", "del", str(rec["name"])], capture_output=True)
    return f"veth {rec['name']}" if res.returncode == 0 else None


register_undo("netns", _undo_netns)
register_undo("process", _undo_process)
register_undo("chain", _undo_chain)
register_undo("veth", _undo_veth)
register_undo("dir", lambda rec: None)  # the store is kept: it holds the evidence
register_undo("owner", lambda rec: None)


# ---------------------------------------------------------------------------------------------
# The cleaner


def teardown_records(records: list[dict[str, Any]], errors: list[str]) -> list[str]:
    """Undo records LIFO; append failures to `errors`; return what was removed."""
    removed: list[str] = []
    seen: set[tuple[str, str, str]] = set()
    # Namespaces are removed together at the end, in one batch (they are the first records a
    # run makes, so this keeps the LIFO order); a veth or chain inside one goes with it.
    namespaces = [str(r["name"]) for r in reversed(records) if r.get("kind") == "netns"]
    doomed = set(namespaces)
    for rec in reversed(records):
        key = (str(rec.get("kind")), str(rec.get("name")), str(rec.get("pid", "")))
        if key in seen or rec.get("kind") == "netns":
            continue
        seen.add(key)
        if rec.get("kind") in ("veth", "chain") and rec.get("ns") in doomed:
            continue
        fn = _UNDO.get(str(rec.get("kind")))
        if fn is None:
            errors.append(f"no undo known for {rec.get('kind')} {rec.get('name')}")
            continue
        try:
            what = fn(rec)
        except Exception as e:  # gathered and raised together below, like pytest's SetupState
            errors.append(f"{rec.get('kind')} {rec.get('name')}: {e}")
            continue
        if what:
            log.info("removed %s", what)
            removed.append(what)
    try:
        gone = delete_netns(list(dict.fromkeys(namespaces)))
        removed += [f"netns {n}" for n in gone]
        log.info("removed %d namespaces", len(gone))
    except ClusterError as e:
        errors.append(str(e))
    return removed


def teardown_run(run_id: str, index: Path = RUN_INDEX) -> list[str]:
    """Remove everything run `run_id` recorded, plus marked processes and namespaces named by
    our scheme for it. Idempotent; raises TeardownError with every failure at the end."""
    check_run_id(run_id)
    errors: list[str] = []
    removed: list[str] = []
    # Marked processes first: they may sit outside any namespace (loopback clusters).
    pids = marked_pids(run_id)
    if pids:
        try:
            kill_pids(pids)
            removed += [f"process pid {p} (marked)" for p in pids]
        except ClusterError as e:
            errors.append(str(e))
    entry = index / run_id
    ledgers = entry.read_text().splitlines() if entry.exists() else []
    for path in ledgers:
        removed += teardown_records(read_records(Path(path)), errors)
    try:  # created but unrecorded should be impossible; be sure
        removed += [f"netns {n} (by name)" for n in delete_netns(run_namespaces(run_id))]
    except ClusterError as e:
        errors.append(str(e))
    if errors:
        raise TeardownError(errors)
    with contextlib.suppress(FileNotFoundError):
        entry.unlink()
    return removed


def known_runs(index: Path = RUN_INDEX) -> list[str]:
    return sorted(p.name for p in index.iterdir()) if index.exists() else []


def live_owner(run_id: str, index: Path = RUN_INDEX) -> int | None:
    """The pid of a still-running process that owns the run (made its ledger), if any.
    Looks in `index` and in the global index, so a test's private index cannot hide a live
    run of someone else."""
    for idx in {index, RUN_INDEX}:
        entry = idx / run_id
        if not entry.exists():
            continue
        for path in entry.read_text().splitlines():
            for rec in read_records(Path(path)):
                if rec.get("kind") != "owner" or rec.get("start") is None:
                    continue
                pid = int(rec["pid"])
                if pid != os.getpid() and _start_time(pid) == rec["start"]:
                    return pid
    return None


def teardown_all(
    index: Path = RUN_INDEX, *, orphans: bool = True, force: bool = False
) -> list[str]:
    """Tear down every run in the index and, with `orphans`, every namespace whose name
    matches our scheme (fc-<run>-<node>) though its run is not in the index. A run whose
    owner process is still alive is someone's live test: it is skipped unless `force`."""
    errors: list[str] = []
    removed: list[str] = []
    runs = set(known_runs(index))
    if orphans and NETNS_DIR.exists():
        for name in os.listdir(NETNS_DIR):
            m = NETNS_NAME_RE.match(name)
            if m:
                runs.add(m.group(1))
    for run in sorted(runs):
        owner = None if force else live_owner(run, index)
        if owner is not None:
            log.info("run %s is live (pid %d): left alone", run, owner)
            continue
        try:
            removed += teardown_run(run, index)
        except TeardownError as e:
            errors += e.errors
    if errors:
        raise TeardownError(errors)
    return removed
