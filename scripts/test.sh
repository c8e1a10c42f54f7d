#!/usr/bin/env bash
# The README's test command: set the machine up (apt packages, .venv, dockerd, the node image),
# lint, type-check, run every test against real servers, and stop what it started.
set -euo pipefail
cd "$(dirname "$0")/.."
# Everything but pyfuse3, whose compiling (about 25 s on one core on a new machine) runs below
# beside the builds rather than before them (scripts/setup.sh, FC_SETUP_FUSE).
FC_SETUP_FUSE=later bash scripts/setup.sh
# The third-party lock clients and servers the tests drive (cached by source hash: a no-op when
# built). On a fresh machine these are minutes of compiling while the node image below is minutes
# of downloading, so they run side by side; the build's log is shown when it ends.
# The builds of many CPU minutes (consul: about 10) run beside these and then beside the tests:
# a test that needs one waits while it runs (tests/conftest.py: wait_for_late_builds). Started
# with the others rather than after them, so that on a fresh machine (CPU-bound from start to
# end) it ends before the rest of the suite does and its tests are not the run's tail alone.
# The toolchains both need are installed first, once (two apt-gets at once would collide).
builds_log=$(mktemp)
late_log=$(mktemp)
bash scripts/build-clients.sh --dry-run >/dev/null
bash scripts/build-clients.sh --late without >"$builds_log" 2>&1 &
builds=$!
.venv/bin/fencecheck build --late only >"$late_log" 2>&1 &
late=$!
export FC_LATE_BUILDS_PID=$late
collect=
stop_builds() {
  kill "$builds" "$late" $collect 2>/dev/null || true
  rm -f "$builds_log" "$late_log"
}
trap stop_builds EXIT
# The rest of the set-up (pyfuse3), beside the builds; the checks and the tests below need it.
bash scripts/setup.sh
# Every xdist worker imports every test module, and pytest rewrites their asserts (and those of
# its plugins: hypothesis, anyio, xdist) on import: 16 s of CPU a worker, 6 s when it finds them
# rewritten in __pycache__ (docs/test-suite-cpu.md), which it reads even under
# PYTHONDONTWRITEBYTECODE but then never writes. So one collection fills that cache first, beside
# the lint and type checks (one core each; about 15 and 17 s), not after them.
env -u PYTHONDONTWRITEBYTECODE .venv/bin/pytest --collect-only -q -p no:cacheprovider "$@" \
  >/dev/null 2>&1 &
collect=$!
.venv/bin/ruff check .
.venv/bin/mypy
# Stop dockerd at the end only if this run started it (one already running may serve others).
dockerd_said=$(bash scripts/dockerd.sh start)
echo "$dockerd_said"
case "$dockerd_said" in
  *started*)
    trap 'stop_builds; bash scripts/dockerd.sh stop || true' EXIT ;;
esac
# The docker runtime's node image: built once per machine (debootstrap + docker import where no
# registry can be reached), then cached by content hash.
.venv/bin/python -m fencecheck.clusters.runtimes.image
builds_rc=0
wait "$builds" || builds_rc=$?
cat "$builds_log"
if [ "$builds_rc" != 0 ]; then
  echo "test.sh: scripts/build-clients.sh failed (exit $builds_rc)" >&2
  exit "$builds_rc"
fi
# Side by side (pytest-xdist): the tests mostly wait for runs to reach their time limits, so
# more workers than cores; the heavy ones share one xdist group (tests/conftest.py) and so never
# start together. FC_TEST_WORKERS overrides the number (measured in the README).
# 5: since a run forks its workers from a zygote, 5 workers took 12 min 4 s of pytest where 4
# took 14 min 46 s and 6 took 13 min 8 s (docs/measurements.md, rows 38 to 40).
workers=${FC_TEST_WORKERS:-5}
# The collection started above has filled pytest's cache of rewritten test modules.
wait "$collect" || true
# A worker that dies is not replaced: with --dist loadgroup, pytest-xdist 3.8 can deadlock after
# replacing a crashed worker (pytest-xdist #1323, #1327, #1378), which turned a crash into a run
# that never ends. Without replacement the run ends, the crashed test is named and fails the run
# (the rest of its worker's share is not run: it is a failed run either way).
set +e
.venv/bin/pytest -n "$workers" --dist loadgroup --max-worker-restart 0 --durations=25 "$@"
rc=$?
late_rc=0
wait "$late" || late_rc=$?
cat "$late_log"
if [ "$late_rc" != 0 ]; then
  echo "test.sh: fencecheck build --late only failed (exit $late_rc)" >&2
  [ "$rc" != 0 ] || rc=$late_rc
fi
set -e
# Every test tears down its own runs; this catches a run whose test was killed outright.
.venv/bin/fencecheck teardown --all >/dev/null 2>&1 || true
exit $rc
