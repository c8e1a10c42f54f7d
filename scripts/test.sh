#!/usr/bin/env bash
# The README's test command: set the machine up, lint, type-check, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
FC_SETUP_EXTRA="${FC_SETUP_EXTRA:-}" bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/mypy
set +e
.venv/bin/pytest "$@"
rc=$?
set -e
.venv/bin/fencecheck teardown --all >/dev/null 2>&1 || true
exit $rc
