#!/usr/bin/env bash
# Install what fencecheck needs on a fresh Debian machine, as root; safe to re-run.
#   bash scripts/setup.sh            servers, tools and the Python environment (.venv)
#   FC_SETUP_EXTRA="docker.io chromium" bash scripts/setup.sh   more apt packages
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "setup.sh: run as root (network namespaces, iptables and apt need it)" >&2
  exit 3
fi

# Tools; the lock services' packages are declared by their backend descriptors (below).
# containernetworking-plugins: the pod network of the one-node Kubernetes (clusters/kube/).
pkgs=(python3 python3-venv python3-dev gcc libc6-dev iproute2 iptables procps psmisc
      openssh-server chromium chromium-driver docker.io debootstrap sudo
      fuse3 libfuse3-dev pkg-config containernetworking-plugins
      ${FC_SETUP_EXTRA:-})
install_missing() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ "${#missing[@]}" -gt 0 ] || return 0
  echo "setup.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  # Debian's postinst scripts would start redis/postgres system-wide: fencecheck starts its own.
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  apt-get install -y -q --no-install-recommends "${missing[@]}"
}
install_missing "${pkgs[@]}"
# descriptors/ (fencecheck.descriptors) is standard-library only, so the system python3 can list them.
mapfile -t backend_pkgs < <(python3 -m fencecheck.descriptors apt)
[ "${#backend_pkgs[@]}" -gt 0 ] || { echo "setup.sh: no backend packages listed" >&2; exit 3; }
install_missing "${backend_pkgs[@]}"

py=python3
stamp=.venv/.fencecheck-installed
# The checkout goes on sys.path as a plain .pth line ("compat" editable mode), not through the
# import hook setuptools installs by default: that hook imports importlib.metadata and email in
# every Python process of the venv, 20 to 30 ms of CPU each (docs/measurements.md, "A
# process's start"), and a test run starts some 2,000.
mode=editable_mode=compat
# The two dependencies PyPI has only as source are built into a wheelhouse by pip, which keeps
# its builds in its cache: uv would build them again on every new venv, as this machine's package
# index answers its revalidations "modified".
wheels=${XDG_CACHE_HOME:-$HOME/.cache}/fencecheck/wheels
if [ ! -x .venv/bin/python ] || [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] \
    || [ "$(cat "$stamp")" != "$mode" ]; then
  "$py" -m venv .venv
  # Every extra but `fuse` (what runs clusters, each family of lock clients) and the tools of the
  # tests, read from pyproject.toml's `all`; pyfuse3 (`fuse`) comes after them, below.
  extras=$("$py" -c 'import re, tomllib
all_ = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["all"]
print(",".join(e for e in re.search(r"\[(.*)\]", all_[0]).group(1).split(",") if e != "fuse"))')
  # installed by uv (PyPI): 4 s where pip took 34 (docs/measurements.md, "Making the venv")
  mkdir -p "$wheels"
  if .venv/bin/pip install -q --disable-pip-version-check uv==0.13.9 \
      && .venv/bin/pip wheel -q --disable-pip-version-check --no-deps -w "$wheels" etcd3==0.12.0
  then
    # setuptools calls the compat mode transitional (to be removed one day): then the default
    .venv/bin/uv pip install -q --python .venv/bin/python --find-links "$wheels" \
        -e ".[$extras,dev]" --config-settings-package "fencecheck:$mode" \
      || .venv/bin/uv pip install -q --python .venv/bin/python --find-links "$wheels" \
        -e ".[$extras,dev]"
  else
    echo "setup.sh: uv could not be installed; pip instead (slower)" >&2
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -e ".[$extras,dev]" --config-settings "$mode" \
      || .venv/bin/pip install -q -e ".[$extras,dev]"
  fi
  echo "$mode" >"$stamp"
fi
# The checker's loops in C (setup.py; checker/native.py): built with the venv, and again here
# when their sources changed since (a checkout edited or pulled), so that the checker never
# falls back to its slower Python loops unnoticed. Optional: without a compiler they read the same.
if ! .venv/bin/python -c "import sys; from fencecheck.checker import native
sys.exit(not all(native.compiled(m) for m in ('_pairing', '_rwpass')))" 2>/dev/null; then
  .venv/bin/python setup.py -q build_ext --inplace >/dev/null \
    || echo "setup.sh: the checker's C loops did not build; its Python loops will read" >&2
fi
# pyfuse3 (the `fuse` extra: the lose-unsynced file system) is C, about 25 s of gcc on one core
# when no wheel is at hand: on a new machine the one thing setup does for that long. So it comes
# last, and FC_SETUP_FUSE=later leaves it out: scripts/test.sh starts its builds on the venv
# without it and runs this script again beside them, which then has only this left to do.
fuse=pyfuse3==3.5.0  # the wheel built is the one installed
if [ "${FC_SETUP_FUSE:-}" != later ] && ! .venv/bin/python -c "import pyfuse3" 2>/dev/null; then
  mkdir -p "$wheels"
  .venv/bin/pip wheel -q --disable-pip-version-check --no-deps -w "$wheels" "$fuse"
  if [ -x .venv/bin/uv ]; then
    .venv/bin/uv pip install -q --python .venv/bin/python --find-links "$wheels" "$fuse"
  else
    .venv/bin/pip install -q --find-links "$wheels" "$fuse"
  fi
fi
# Each run starts its controller and a worker per client as new Python processes. Where
# PYTHONDONTWRITEBYTECODE is set (this machine sets it) none of them ever finds the project's own
# modules compiled, so each compiled them again (0.15 s of CPU a controller, 2,000 processes a
# test run); compileall writes them anyway, once (the rooms are symlinks, which it would skip).
.venv/bin/python -m compileall -q -j 0 fencecheck $(find fencecheck -maxdepth 1 -type l) >/dev/null
if [ "${FC_SETUP_FUSE:-}" = later ]; then
  echo "setup.sh: ready but for pyfuse3 (FC_SETUP_FUSE=later: run this again for it)"
else
  echo "setup.sh: ready (.venv/bin/fencecheck)"
fi
