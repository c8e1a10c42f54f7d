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


def test_a_second_test_session_gets_loopback_addresses_of_its_own() -> None:
    """Two pytest sessions on one machine (a CI run beside an engineer's, a benchmark beside the
    suite) must not start module-scoped servers on the same 127.W.x.y: each test process holds
    its slot W machine-wide for as long as it lives."""
    from tests.conftest import WORKER
    probe = "import tests.conftest as c; print(c.WORKER)"
    others = [subprocess.Popen([sys.executable, "-c", probe + "; import sys; sys.stdin.read()"],
                               cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
              for _ in range(2)]
    try:
        slots = {WORKER, *(int(p.stdout.readline()) for p in others if p.stdout)}
    finally:
        for p in others:
            p.communicate("", timeout=60)
    assert len(slots) == 3, slots
    assert all(1 <= s <= 254 for s in slots), slots
    # the kernel gives a slot back when its holder ends: a new process may take one again
    again = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True,
                           timeout=60, check=True)
    assert int(again.stdout) != WORKER
