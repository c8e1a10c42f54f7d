"""The image the nightly's Indexed Job runs on the one-node cluster (fencecheck/clusters/kube/):
the docker runtime's node image (clusters/runtimes/image.py: Debian with every lock service)
with this checkout at /fencecheck, its venv (the host venv's packages at the host venv's
versions) and the client programs built on this machine (the build cache at the same path), as
examples/k8s/Dockerfile makes it for a real cluster from debian:bookworm and scripts/setup.sh.

Built by the host's dockerd in two images, each tagged by the hash of what it is made of and
built only when that tag is missing: `fencecheck-job-deps:<hash>` (the node image, the venv,
the built clients: rebuilt when one of those changes) and `fencecheck-job:<hash>` (that plus
the checkout's files: rebuilt when a file changes, in seconds). Then `import_into(kube)`
streams it into the cluster's containerd; manifests name it with `imagePullPolicy: Never`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import logging
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fencecheck.clusters.base import ClusterError
from fencecheck.clusters.runtimes.image import ensure_image
from fencecheck.descriptors import catalog
from fencecheck.toolchain import cache

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]  # a checkout: fencecheck/ sits in the repository
LOCK = Path("/run/fencecheck/job-image.lock")
DEPS_REPO = "fencecheck-job-deps"
JOB_REPO = "fencecheck-job"

# The venv is made in a first stage from wheels built on the host (this machine's pip reaches
# its index through its own settings and certificates, which a container does not have) and
# copied out, so the wheels are not a layer of the image.
DEPS_DOCKERFILE = """\
ARG BASE
FROM ${BASE} AS venv
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8
RUN apt-get update -q \\
 && apt-get install -y -q --no-install-recommends python3-venv \\
 && rm -rf /var/lib/apt/lists/*
COPY wheels /tmp/wheels
RUN python3 -m venv /fencecheck/.venv \\
 && /fencecheck/.venv/bin/pip install -q --no-index --find-links /tmp/wheels \\
      -r /tmp/wheels/requirements.txt

FROM ${BASE}
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8
# what scripts/setup.sh adds to the node image's packages for the harness itself
RUN apt-get update -q \\
 && apt-get install -y -q --no-install-recommends libfuse3-3 fuse3 psmisc \\
 && rm -rf /var/lib/apt/lists/*
COPY --from=venv /fencecheck/.venv /fencecheck/.venv
COPY clients /var/cache/fencecheck/clients
"""

JOB_DOCKERFILE = """\
ARG DEPS
FROM ${DEPS}
COPY src /fencecheck
RUN /fencecheck/.venv/bin/pip install -q --no-deps --no-build-isolation -e /fencecheck
ENV PATH=/fencecheck/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /fencecheck
"""


def requirements() -> str:
    """The packages of this venv at their versions (this checkout itself left out)."""
    res = subprocess.run([sys.executable, "-m", "pip", "freeze", "--all", "--exclude-editable"],
                         capture_output=True, text=True, check=True)
    return "".join(f"{line}\n" for line in res.stdout.splitlines()
                   if line and not line.startswith("#") and " @ " not in line)


def wheels(reqs: str) -> Path:
    """A folder of wheels of `reqs` (and reqs as requirements.txt), made by this venv's pip into
    the build cache, once per set of requirements."""
    final = cache.cache_root() / f"job-wheels-{hashlib.sha256(reqs.encode()).hexdigest()[:16]}"

    def fill(folder: Path) -> None:
        (folder / "requirements.txt").write_text(reqs)

    def steps(folder: Path) -> list[list[str]]:
        return [[sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", ".",
                 "-r", "requirements.txt"]]

    cache.run(final, "job-wheels", fill, steps, ClusterError)
    return final


def client_folders() -> list[Path]:
    """The build-cache folders of the current builds of every shipped client and pinned server
    that is built on this machine (stale builds of older sources are left out)."""
    import importlib

    from fencecheck.workloads.clients import build as clients

    folders = [clients.build_dir(n) for n in clients.BUILDS]
    for b in catalog.backends().values():
        if b.server_build is not None:
            folders.append(importlib.import_module(b.server_build).build_dir())
    return sorted({f for f in folders if cache.is_built(f)})


def source_files(root: Path = REPO) -> list[Path]:
    """The checkout's files (tracked, and new ones git does not ignore), relative to it."""
    if not (root / "pyproject.toml").is_file() or not (root / ".git").exists():
        raise ClusterError(f"the Job's image is built from a git checkout; {root} is not one")
    res = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
                          "--exclude-standard"], capture_output=True, check=True)
    names = sorted({n for n in res.stdout.decode().split("\0") if n})
    return [Path(n) for n in names if (root / n).is_symlink() or (root / n).is_file()]


def _digest(h: Any, root: Path, rel: Path) -> None:
    p = root / rel
    h.update(str(rel).encode() + b"\0")
    h.update(os.readlink(p).encode() if p.is_symlink() else p.read_bytes())
    h.update(b"\0")


def _tags(client: Any, root: Path) -> tuple[str, str, str, list[Path], list[Path]]:
    base = ensure_image(client)
    reqs, folders, files = requirements(), client_folders(), source_files(root)
    h = hashlib.sha256(f"{base}\0{DEPS_DOCKERFILE}\0{reqs}\0".encode())
    for f in folders:
        h.update(f.name.encode() + b"\0")
    deps = f"{DEPS_REPO}:{h.hexdigest()[:16]}"
    h = hashlib.sha256(f"{deps}\0{JOB_DOCKERFILE}\0".encode())
    for rel in files:
        _digest(h, root, rel)
    return base, deps, f"{JOB_REPO}:{h.hexdigest()[:16]}", folders, files


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _has(client: Any, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def _add_text(tar: tarfile.TarFile, name: str, text: str) -> None:
    data = text.encode()
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _build(client: Any, tag: str, dockerfile: str, buildargs: dict[str, str],
           fill: Any) -> None:
    import docker.errors

    t0 = time.monotonic()
    log.warning("building %s (takes minutes the first time)", tag)
    with tempfile.TemporaryFile() as ctx:
        with tarfile.open(fileobj=ctx, mode="w") as tar:
            _add_text(tar, "Dockerfile", dockerfile)
            fill(tar)
        ctx.seek(0)
        try:
            client.images.build(fileobj=ctx, custom_context=True, tag=tag, buildargs=buildargs,
                                network_mode="host", rm=True, forcerm=True, pull=False)
        except docker.errors.BuildError as e:
            tail = " / ".join(str(x.get("stream", x.get("error", ""))).strip()
                              for x in list(e.build_log)[-4:])
            raise ClusterError(f"building {tag} failed: {e.msg}: {tail}") from None
        except docker.errors.APIError as e:
            raise ClusterError(f"building {tag} failed: {e}") from None
    log.warning("built %s in %.0f s", tag, time.monotonic() - t0)


def ensure_job_image(client: Any, root: Path = REPO) -> str:
    """The Job image's tag, building what is missing (module docstring)."""
    with _locked():
        base, deps, tag, folders, files = _tags(client, root)
        if not _has(client, deps):
            wheelhouse = wheels(requirements())

            def deps_files(tar: tarfile.TarFile) -> None:
                tar.add(str(wheelhouse), arcname="wheels")
                for f in folders:
                    tar.add(str(f), arcname=f"clients/{f.name}")
            _build(client, deps, DEPS_DOCKERFILE, {"BASE": base}, deps_files)
        if not _has(client, tag):

            def src_files(tar: tarfile.TarFile) -> None:
                for rel in files:
                    tar.add(str(root / rel), arcname=f"src/{rel}", recursive=False)
            _build(client, tag, JOB_DOCKERFILE, {"DEPS": deps}, src_files)
        return tag
