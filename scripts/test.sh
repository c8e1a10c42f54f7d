#!/usr/bin/env bash
# The README's test command: set the machine up (apt packages, .venv, dockerd, the node image),
# lint, type-check, run every test against real servers, and stop what it started.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The third-party lock clients the tests drive (cached by source hash: a no-op when built).
bash scripts/build-clients.sh
.venv/bin/ruff check .
.venv/bin/mypy
bash scripts/dockerd.sh start
trap 'bash scripts/dockerd.sh stop || true' EXIT
# The docker runtime's node image: built once per machine (debootstrap + docker import where no
# registry can be reached), then cached by content hash.
.venv/bin/python -m fencecheck.clusters.runtimes.image
set +e
.venv/bin/pytest --durations=25 "$@"
rc=$?
set -e
.venv/bin/fencecheck teardown --all >/dev/null 2>&1 || true
exit $rc
