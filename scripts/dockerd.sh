#!/usr/bin/env bash
# Start dockerd for the docker tests if none runs, and stop only what this script started.
#   bash scripts/dockerd.sh start   prints "dockerd: already running" or "dockerd: started (pid N)"
#   bash scripts/dockerd.sh stop    stops the dockerd that `start` started (no-op otherwise)
# The pid of a dockerd we started is kept in /run/fencecheck/dockerd.pid; its log beside it.
set -euo pipefail
state=/run/fencecheck
pidfile=$state/dockerd.pid
sock=/var/run/docker.sock

running() { docker -H "unix://$sock" version >/dev/null 2>&1; }

case "${1:-start}" in
start)
  if running; then
    echo "dockerd: already running"
    exit 0
  fi
  command -v dockerd >/dev/null || { echo "dockerd: not installed (apt-get install docker.io)" >&2; exit 3; }
  mkdir -p "$state"
  setsid dockerd >"$state/dockerd.log" 2>&1 </dev/null &
  echo $! >"$pidfile"
  for _ in $(seq 1 150); do
    if running; then
      echo "dockerd: started (pid $(cat "$pidfile"))"
      exit 0
    fi
    kill -0 "$(cat "$pidfile")" 2>/dev/null || break
    sleep 0.2
  done
  echo "dockerd: did not come up; see $state/dockerd.log" >&2
  exit 3
  ;;
stop)
  [ -f "$pidfile" ] || { echo "dockerd: not started by this script"; exit 0; }
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null && grep -q dockerd "/proc/$pid/comm" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    echo "dockerd: stopped (pid $pid)"
  fi
  rm -f "$pidfile"
  ;;
*)
  echo "usage: $0 start|stop" >&2
  exit 3
  ;;
esac
