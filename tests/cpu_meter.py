"""Where the test suite's CPU goes: a pytest plugin for measuring, never loaded by the test
command itself (docs/test-suite-cpu.md; `benchmarks/bench_test_cpu.py` loads it with
`-p tests.cpu_meter` and FC_TEST_CPU=FOLDER, and turns BSD process accounting on around it).

Each test process (every xdist worker) moves itself into a cpuacct cgroup of its own
(`/sys/fs/cgroup/cpuacct/fc-testcpu/<tag>-<worker>`), so every process it starts, servers and
`fencecheck run`s and their workers included, is counted there whatever its session or
namespace; a worker runs one test at a time, so the cgroup's counter before and after a test is
that test's CPU (setup and teardown included; a module's servers count to the tests they run
beside). Docker containers are not in it (dockerd starts them in its own cgroup).

Written to FOLDER:
- `tests-<worker>.jsonl`: one line per test: nodeid, worker, xdist group, wall seconds, CPU
  seconds of the cgroup (user, system) and of the test process alone (`self_s`); and a last
  line with the session's totals (collection and the time between tests included).
- `procs-<worker>.jsonl`: every process seen in the cgroup (sampled twice a second): pid, its
  start (clock ticks since boot, as /proc/PID/stat has it), ppid, command line, and the test
  running when it was first seen; the accounting file's records are matched to these by
  pid and start to name what a short command name ("python", "java") cannot.
Without FC_TEST_CPU the plugin does nothing; where cgroups cannot be made (not root, no cgroup
v1 cpuacct) only the test process's own CPU is written.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

CPUACCT = Path("/sys/fs/cgroup/cpuacct")
SAMPLE_S = 0.5


def _own_cgroup() -> Path:
    """This process's cpuacct cgroup folder (where it goes back at the end)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpuacct" in controllers.split(","):
            return CPUACCT / path.lstrip("/")
    return CPUACCT


def _stat(pid: int) -> tuple[int, int] | None:
    """(ppid, start in clock ticks since boot) of pid, None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), int(fields[19])


def _cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace").strip()
    return ""


class Meter:
    """One test process's cgroup, its sampler and its output files."""

    def __init__(self, folder: Path, worker: str) -> None:
        self.worker = worker
        self.folder = folder
        self.tests: IO[str] = (folder / f"tests-{worker}.jsonl").open("a")
        self.procs: IO[str] = (folder / f"procs-{worker}.jsonl").open("a")
        self.cgroup: Path | None = None
        self.home = _own_cgroup()
        self.current = ""  # the running test's nodeid
        self.seen: set[tuple[int, int]] = set()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.sampler = threading.Thread(target=self._sample, name="cpu-meter", daemon=True)

    def start(self) -> None:
        tag = os.environ.get("FC_TEST_CPU_TAG", str(os.getppid()))
        group = CPUACCT / "fc-testcpu" / f"{tag}-{self.worker}"
        try:
            group.mkdir(parents=True, exist_ok=True)
            (group / "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            return  # not root, or no cgroup v1 cpuacct: the process's own CPU only
        self.cgroup = group
        self.sampler.start()

    def usage(self) -> dict[str, float]:
        """CPU seconds so far: the cgroup's (all, user, system) and this process's own."""
        ru = resource.getrusage(resource.RUSAGE_SELF)
        out = {"self_s": ru.ru_utime + ru.ru_stime}
        if self.cgroup is not None:
            for key, name in (("cpu_s", "usage"), ("user_s", "usage_user"),
                              ("sys_s", "usage_sys")):
                out[key] = int((self.cgroup / f"cpuacct.{name}").read_text()) / 1e9
        return out

    def record(self, line: dict[str, Any]) -> None:
        self.tests.write(json.dumps(line) + "\n")
        self.tests.flush()

    def _sample(self) -> None:
        assert self.cgroup is not None
        while not self.stop.wait(SAMPLE_S):
            self.sample_once()

    def sample_once(self) -> None:
        if self.cgroup is None:
            return
        with contextlib.suppress(OSError):
            pids = [int(p) for p in (self.cgroup / "cgroup.procs").read_text().split()]
            with self.lock:
                for pid in pids:
                    st = _stat(pid)
                    if st is None or (pid, st[1]) in self.seen:
                        continue
                    self.seen.add((pid, st[1]))
                    self.procs.write(json.dumps({
                        "pid": pid, "start": st[1], "ppid": st[0], "cmd": _cmdline(pid)[:4000],
                        "test": self.current, "worker": self.worker}) + "\n")
                self.procs.flush()

    def close(self) -> None:
        """Back to the first cgroup, with anything still in ours; ours removed."""
        self.stop.set()
        if self.sampler.is_alive():
            self.sampler.join()
        self.record({"session": self.worker, **{k: round(v, 3) for k, v in self.usage().items()}})
        if self.cgroup is not None:
            self.sample_once()
            for _ in range(50):  # a process still exiting keeps the cgroup busy a moment
                with contextlib.suppress(OSError):
                    for pid in (self.cgroup / "cgroup.procs").read_text().split():
                        with contextlib.suppress(OSError):
                            (self.home / "cgroup.procs").write_text(pid)
                    self.cgroup.rmdir()
                    break
                time.sleep(0.1)
        self.tests.close()
        self.procs.close()


_meter: Meter | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _meter
    folder = os.environ.get("FC_TEST_CPU")
    distributing = getattr(config.option, "numprocesses", None) and not hasattr(
        config, "workerinput")
    if not folder or distributing:
        return  # off, or the xdist controller (it runs no test)
    Path(folder).mkdir(parents=True, exist_ok=True)
    _meter = Meter(Path(folder), os.environ.get("PYTEST_XDIST_WORKER", "main"))
    _meter.start()


def pytest_unconfigure(config: pytest.Config) -> None:
    global _meter
    if _meter is not None:
        _meter.close()
        _meter = None


def _group(item: pytest.Item) -> str:
    mark = item.get_closest_marker("xdist_group")
    if mark is None:
        return ""
    return str(mark.args[0] if mark.args else mark.kwargs.get("name", ""))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[Any]:
    meter = _meter
    if meter is None:
        return (yield)
    meter.sample_once()
    with meter.lock:
        meter.current = item.nodeid
    before, t0, w0 = meter.usage(), time.time(), time.monotonic()
    try:
        return (yield)
    finally:
        meter.sample_once()
        after = meter.usage()
        line: dict[str, Any] = {"test": item.nodeid, "worker": meter.worker,
                                "group": _group(item), "start": t0,
                                "wall_s": round(time.monotonic() - w0, 3)}
        line.update({k: round(after[k] - before[k], 3) for k in after})
        meter.record(line)
