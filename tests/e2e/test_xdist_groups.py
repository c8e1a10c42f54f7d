"""The suite's own parallelism: scripts/test.sh runs `--dist loadgroup`, and tests/conftest.py's
GROUPS put the heavy modules in xdist groups so that they never start together. pytest 9.2
silently stopped that grouping (pytest-xdist issue #1386: every test spread round-robin), which
this catches: the refusals of one grouped module, run by two workers, all land on one."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import GROUPS, REPO


def test_a_grouped_module_runs_on_one_worker() -> None:
    module = "tests/e2e/test_kubernetes.py"
    assert GROUPS[module] == "kube"
    r = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v",
                        "-p", "no:cacheprovider", module, "-k", "bad_combinations"],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    ran = re.findall(r"^\[(gw\d+)\] .*PASSED .*@kube\s*$", r.stdout, re.M)
    assert len(ran) >= 2, r.stdout[-2000:]
    assert len(set(ran)) == 1, ran
