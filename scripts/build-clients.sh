#!/usr/bin/env bash
# Build the shipped third-party lock clients and the pinned servers (kube-apiserver, nats-server)
# into /var/cache/fencecheck/clients (or $FENCECHECK_CLIENT_CACHE), cached by source hash: an
# unchanged one is a no-op. A thin wrapper of `fencecheck build` (fencecheck/cli/build.py holds
# the recipes) that first installs the missing toolchains with apt.
#   bash scripts/build-clients.sh                 all of them
#   bash scripts/build-clients.sh node-redlock    one (`.venv/bin/fencecheck build --dry-run` lists them)
# Needs scripts/setup.sh first (.venv). The README's `fencecheck run` never builds these.
set -euo pipefail
cd "$(dirname "$0")/.."
# Go, Maven, the JDK, Node.js, npm and Debian's Curator jars that this machine lacks
# (toolchain/tools.py: standard library only, so the system python3 can say).
mapfile -t need < <(python3 -m fencecheck.toolchain.tools missing)
if [ "${#need[@]}" -gt 0 ] && [ -n "${need[0]}" ]; then
  echo "build-clients.sh: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${need[@]}"
fi
exec .venv/bin/fencecheck build "$@"
