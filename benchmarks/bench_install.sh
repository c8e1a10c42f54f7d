#!/usr/bin/env bash
# Install size and time of fencecheck as a user installs it: a wheel built from this checkout,
# `pip install` of it into a new virtual environment outside the checkout, with pip's cache off
# (every dependency downloaded from PyPI, sdists built), once for the core and once with every
# extra. Prints, for each: packages installed, the venv's size and the install's wall time.
#   bash benchmarks/bench_install.sh [EXTRA ...]     default: the core, then all
# Needs scripts/setup.sh first (.venv, for the build) and the network; pyfuse3 (in `all`, the
# `fuse` extra) builds against libfuse3-dev and pkg-config.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d /tmp/fc-bench-install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
.venv/bin/python -m build --no-isolation --wheel --outdir "$tmp/dist" . >"$tmp/build.log" 2>&1 ||
  { cat "$tmp/build.log" >&2; exit 3; }
wheel=$(ls "$tmp"/dist/fencecheck-*.whl)
[ "$#" -gt 0 ] || set -- core all
printf '%-6s %9s %8s %8s\n' install packages size seconds
for extra in "$@"; do
  venv="$tmp/venv-$extra"
  python3 -m venv "$venv"
  base=$("$venv/bin/pip" list --format=freeze 2>/dev/null | wc -l)
  target="$wheel"
  [ "$extra" = core ] || target="$wheel[$extra]"
  t0=$(date +%s.%N)
  (cd "$tmp" && "$venv/bin/pip" install -q --no-cache-dir --disable-pip-version-check "$target")
  t1=$(date +%s.%N)
  n=$(( $("$venv/bin/pip" list --format=freeze 2>/dev/null | wc -l) - base ))
  size=$(du -sm "$venv" | cut -f1)
  printf '%-6s %9d %6d MB %8.0f\n' "$extra" "$n" "$size" "$(echo "$t1 - $t0" | bc)"
done
echo "(load: $(cut -d' ' -f1-3 /proc/loadavg))"
