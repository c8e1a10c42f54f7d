"""What each Python process of a run costs before it does any work (issue 24). A test run starts
some 2,000 of them (a controller per run, a worker per client, a final read, the CLI commands the
tests call), so a few tens of milliseconds each are minutes of CPU on two cores. Run from the
checkout, with the venv scripts/setup.sh made:

    .venv/bin/python benchmarks/bench_startup.py [--repeat 7] [--run]

Prints the median CPU (user + sys, from the child's rusage) of: the interpreter alone (`-c
pass`, which pays for the site-packages `.pth` files), a Redis worker's imports (the worker loop
and the redis-py client), `fencecheck --help`; with `--run`, also the controller's own CPU over a
`fencecheck run` of the default configuration with an 8 s time limit (its children not counted),
and that of its children. Figures in docs/measurements.md ("The harness ...").
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

PY = sys.executable
CASES = {
    "interpreter (-c pass)": [PY, "-c", "pass"],
    "a Redis worker's imports": [PY, "-c", "import fencecheck.workloads.loops.worker, "
                                           "fencecheck.workloads.clients.redis"],
    "fencecheck --help": [PY, "-m", "fencecheck", "--help"],
}
# The controller reports its own CPU and its children's as it exits (runpy keeps `-m` behaviour).
_SELF = ("import atexit, resource, runpy, sys\n"
         "def _say():\n"
         "    s = resource.getrusage(resource.RUSAGE_SELF)\n"
         "    c = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
         "    print('CPU', s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime, file=sys.stderr)\n"
         "atexit.register(_say)\n"
         "sys.argv = ['fencecheck', *sys.argv[1:]]\n"
         "runpy.run_module('fencecheck', run_name='__main__')\n")


def cpu_of(argv: Sequence[str]) -> float:
    """The CPU seconds (user + sys) of one run of argv and whatever it waited for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def controller(store: Path) -> tuple[float, float]:
    """(the controller's own CPU, its children's) over one default run of 8 s."""
    r = subprocess.run([PY, "-c", _SELF, "run", "--store", str(store), "--time-limit", "8",
                        "--seed", "1"], capture_output=True, text=True, check=False)
    line = next((x for x in r.stderr.splitlines() if x.startswith("CPU ")), None)
    if line is None:
        raise SystemExit(f"the run said no CPU line (exit {r.returncode}): {r.stderr[-400:]}")
    own, children = map(float, line.split()[1:])
    return own, children


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--run", action="store_true", help="also measure `fencecheck run`s (root)")
    args = ap.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f}; {args.repeat} runs each; median CPU")
    for name, cmd in CASES.items():
        cpu_of(cmd)  # once first: the page cache, not the first process, is what a suite meets
        figures = [cpu_of(cmd) for _ in range(args.repeat)]
        print(f"  {name:<28} {statistics.median(figures) * 1000:7.0f} ms")
    if args.run:
        with tempfile.TemporaryDirectory() as tmp:
            runs = [controller(Path(tmp)) for _ in range(min(args.repeat, 3))]
        print(f"  {'a run: its controller':<28} {statistics.median(r[0] for r in runs):7.2f} s")
        print(f"  {'a run: what it started':<28} {statistics.median(r[1] for r in runs):7.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
