#!/usr/bin/env bash
# Build the shipped third-party lock clients (node-redlock, curator, etcd-go; go-redsync,
# etcd-go-election, client-go (Kubernetes Lease leader election); redisson, redisson-fenced,
# shedlock, shedlock-jdbc, quartz, spring-jdbc, spring-redis, spring-jdbc-leader,
# spring-redis-leader from Maven Central; kube-apiserver, nats-server) into
# /var/cache/fencecheck/clients (or $FENCECHECK_CLIENT_CACHE), cached by source hash: an unchanged
# client is a no-op. Installs the toolchains and Debian's Curator when they are missing.
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
# kube-apiserver, the kubernetes backend's server: built from the Kubernetes Go modules into the
# same cache (clusters/services/kube_build.py), with all, or when named.
# nats-server likewise, for the nats backend (clusters/services/nats_build.py: a pinned release).
kube=0; natsd=0; clients=()
[ "$#" -eq 0 ] && kube=1 && natsd=1
for a in "$@"; do
  if [ "$a" = kube-apiserver ]; then kube=1
  elif [ "$a" = nats-server ]; then natsd=1
  else clients+=("$a"); fi
done
[ "$kube" = 1 ] && .venv/bin/python -m fencecheck.clusters.services.kube_build
[ "$natsd" = 1 ] && .venv/bin/python -m fencecheck.clusters.services.nats_build
if [ "$#" -eq 0 ] || [ "${#clients[@]}" -gt 0 ]; then
  exec .venv/bin/python -m fencecheck.workloads.clients.build "${clients[@]}"
fi
