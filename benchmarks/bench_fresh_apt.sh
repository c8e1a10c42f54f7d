#!/usr/bin/env bash
# An upper bound of the test command's apt step on a fresh machine: a bare Debian bookworm
# (debootstrap minbase, in a folder under /tmp, from this machine's own Debian mirror), then one
# `apt-get update` and `apt-get install` of every package scripts/setup.sh and `fencecheck build`
# (toolchain/tools.py) ask for, less the toolchains a new machine of this project's kind already
# has (Go, the JDK, Maven, Node.js, npm). A new machine has more of these installed (python3,
# gcc), so it installs less than this.
#   bash benchmarks/bench_fresh_apt.sh        prints the seconds of each step; removes the folder
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench_fresh_apt.sh: run as root" >&2; exit 3; }
root=$(mktemp -d /tmp/fc-fresh-apt.XXXXXX)
cleanup() { umount "$root/proc" 2>/dev/null || true; rm -rf "$root"; }
trap cleanup EXIT
# The lists, read from the scripts themselves so that this measures what they install.
setup_pkgs=$(sed -n '/^pkgs=(/,/)/p' scripts/setup.sh | tr -d '()' | sed 's/pkgs=//; s/\${FC_SETUP_EXTRA:-}//')
# Debian's Curator jars (the javac toolchain beside the JDK): toolchain/tools.py
curator=$(python3 -m fencecheck.toolchain.tools apt javac | grep -v default-jdk | tr '\n' ' ')
backend=$(python3 -m fencecheck.descriptors apt | tr '\n' ' ')
pkgs="$(echo $setup_pkgs) $backend $curator"
t0=$(date +%s)
# The mirror this machine's apt uses (clusters/runtimes/apt_sources.py; deb.debian.org if none)
mirror=$(python3 -m fencecheck.clusters.runtimes.apt_sources bookworm)
debootstrap --variant=minbase bookworm "$root" "$mirror" >/dev/null
t1=$(date +%s)
mount -t proc proc "$root/proc"
cp /etc/resolv.conf "$root/etc/resolv.conf"
printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d" && chmod +x "$root/usr/sbin/policy-rc.d"
chroot "$root" bash -c "export DEBIAN_FRONTEND=noninteractive; apt-get update -q >/dev/null &&
  apt-get install -y -q --no-install-recommends $pkgs" > "$root.log" 2>&1
t2=$(date +%s)
echo "packages: $pkgs"
grep -E "newly installed|^Need to get" "$root.log"
echo "debootstrap (not part of the test command): $((t1 - t0)) s"
echo "apt-get update + install: $((t2 - t1)) s (load: $(cut -d' ' -f1-3 /proc/loadavg))"
rm -f "$root.log"
