#!/usr/bin/env bash
# Build the shipped third-party lock clients (node-redlock, curator, etcd-go; go-redsync,
# etcd-go-election, client-go (Kubernetes Lease leader election), consul-go, nats-go; redisson,
# redisson-fenced, shedlock, shedlock-jdbc from Maven Central; kube-apiserver, nats-server,
# consul) into /var/cache/fencecheck/clients (or $FENCECHECK_CLIENT_CACHE), cached by source
# hash: an unchanged client is a no-op. Installs the toolchains and Debian's Curator when they
# are missing.
#   bash scripts/build-clients.sh                 all of them
#   bash scripts/build-clients.sh node-redlock    one
# Needs scripts/setup.sh first (.venv). The README's `fencecheck run` never builds these.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

need=()
command -v node >/dev/null || need+=(nodejs)
command -v npm >/dev/null || need+=(npm)
command -v javac >/dev/null || need+=(default-jdk-headless)
command -v go >/dev/null || need+=(golang-go)
command -v mvn >/dev/null || need+=(maven)  # the JVM clients' dependencies (issue 19)
# Curator and what it runs with, from Debian (javac against them: no Maven resolution).
for p in libcurator-recipes-java libjackson2-databind-java libslf4j-java libguava-java; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ "${#need[@]}" -gt 0 ]; then
  echo "build-clients.sh: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${need[@]}"
fi
# The servers built here at a pinned release, where no package ships them (kube-apiserver,
# nats-server, consul: each backend's descriptor names its builder, `python3 -m
# fencecheck.descriptors builds`), into the same cache: with all, or when named.
declare -A builder=()
order=()
while read -r name module; do
  builder[$name]=$module; order+=("$name")
done < <(.venv/bin/python -m fencecheck.descriptors builds)
servers=(); clients=()
[ "$#" -eq 0 ] && servers=("${order[@]}")
for a in "$@"; do
  if [ -n "${builder[$a]:-}" ]; then servers+=("$a")
  else clients+=("$a"); fi
done
for s in "${servers[@]}"; do .venv/bin/python -m "${builder[$s]}"; done
if [ "$#" -eq 0 ] || [ "${#clients[@]}" -gt 0 ]; then
  exec .venv/bin/python -m fencecheck.workloads.clients.build "${clients[@]}"
fi
