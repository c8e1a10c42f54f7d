"""The node image of the docker runtime: `ensure_image` builds `clusters/runtimes/Dockerfile` on
first use and caches it by content hash (tag `fencecheck-node:<hash>`).

Where the base image (`debian:bookworm-slim`) cannot be pulled (no registry reachable, as on an
offline CI machine), the base is made with `debootstrap --variant=minbase bookworm` from the
Debian mirror this machine's apt uses (clusters/runtimes/apt_sources.py) and loaded with
`docker import` as `fencecheck-base:bookworm`; that is logged at WARNING, since it takes minutes.
Both builds hold a file lock, so concurrent runs build once. Images are shared by runs and never
removed by a run's teardown.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import logging
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fencecheck.clusters.base import ClusterError
from fencecheck.clusters.runtimes.apt_sources import debian_mirror

log = logging.getLogger(__name__)

DOCKERFILE = Path(__file__).with_name("Dockerfile")
REPO = "fencecheck-node"
UPSTREAM_BASE = "debian:bookworm-slim"
LOCAL_BASE = "fencecheck-base:bookworm"
LOCK = Path("/run/fencecheck/image.lock")
PULL_TIMEOUT_S = 20.0


def image_tag(base: str, dockerfile: Path = DOCKERFILE) -> str:
    h = hashlib.sha256(dockerfile.read_bytes() + b"\0" + base.encode()).hexdigest()
    return f"{REPO}:{h[:16]}"


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _has(client: Any, ref: str) -> bool:
    import docker.errors

    try:
        client.images.get(ref)
    except docker.errors.ImageNotFound:
        return False
    return True


def cached_image(client: Any) -> str | None:
    """The tag of an already-built node image for either base, if there is one."""
    for base in (UPSTREAM_BASE, LOCAL_BASE):
        tag = image_tag(base)
        if _has(client, tag):
            return tag
    return None


def image_status(client: Any) -> tuple[bool, str]:
    """For `fencecheck doctor`: is the node image built, and if not, how to build it."""
    tag = cached_image(client)
    if tag is not None:
        return True, tag
    how = "" if shutil.which("debootstrap") else "apt-get install debootstrap, then "
    return False, (f"node image not built: {how}python -m fencecheck.clusters.runtimes.image "
                   "(minutes, once)")


def ensure_image(client: Any) -> str:
    """The node image's tag, building it (and its base) first if needed."""
    tag = cached_image(client)
    if tag is not None:
        return tag
    with _locked():
        tag = cached_image(client)  # another run may have built it while we waited
        if tag is not None:
            return tag
        base = ensure_base(client)
        tag = image_tag(base)
        t0 = time.monotonic()
        log.warning("building node image %s from %s (first use; takes minutes)", tag, base)
        build(client, base, tag)
        log.warning("built %s in %.0f s", tag, time.monotonic() - t0)
        return tag


def ensure_base(client: Any) -> str:
    """debian:bookworm-slim if present or pullable, else a debootstrap'd base."""
    import docker.errors

    for ref in (UPSTREAM_BASE, LOCAL_BASE):
        if _has(client, ref):
            return ref
    try:
        client.api.timeout = PULL_TIMEOUT_S
        client.images.pull(UPSTREAM_BASE)
        return UPSTREAM_BASE
    except (docker.errors.APIError, OSError) as e:
        log.warning("cannot pull %s (%s): making the base with debootstrap instead",
                    UPSTREAM_BASE, str(e).splitlines()[0][:200])
    finally:
        client.api.timeout = 600
    debootstrap_base(client)
    return LOCAL_BASE


def debootstrap_base(client: Any, mirror: str | None = None) -> None:
    """bookworm minbase through debootstrap, imported as LOCAL_BASE; from `mirror`, by default
    the Debian mirror this machine's apt uses."""
    mirror = mirror or debian_mirror("bookworm")
    if shutil.which("debootstrap") is None:
        raise ClusterError(
            f"no registry reachable for {UPSTREAM_BASE} and debootstrap is not installed "
            "(apt-get install debootstrap)"
        )
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fc-rootfs-") as tmp:
        root = Path(tmp) / "rootfs"
        argv = ["debootstrap", "--variant=minbase", "bookworm", str(root), mirror]
        log.info("host: %s", argv)
        p = subprocess.run(argv, capture_output=True, text=True)
        if p.returncode != 0:
            tail = " / ".join((p.stderr or p.stdout).strip().splitlines()[-3:])
            raise ClusterError(f"debootstrap failed (exit {p.returncode}): {tail}")
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for f in (root / junk).glob("*.deb"):
                f.unlink()
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        assert tar.stdout is not None
        client.api.import_image_from_data(tar.stdout.read(), repository="fencecheck-base",
                                          tag="bookworm")
        tar.wait()
    log.warning("made base %s with debootstrap in %.0f s", LOCAL_BASE, time.monotonic() - t0)


def build(client: Any, base: str, tag: str) -> None:
    import docker.errors

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(str(DOCKERFILE), arcname="Dockerfile")
    buf.seek(0)
    try:
        # The host network: apt in the build reaches the Debian mirror as the host does, with no
        # dependence on Docker's NAT rules.
        client.images.build(fileobj=buf, custom_context=True, tag=tag, buildargs={"BASE": base},
                            network_mode="host", rm=True, forcerm=True, pull=False)
    except docker.errors.BuildError as e:
        tail = " / ".join(str(x.get("stream", x.get("error", ""))).strip()
                          for x in list(e.build_log)[-4:])
        raise ClusterError(f"building {tag} failed: {e.msg}: {tail}") from None
    except docker.errors.APIError as e:
        raise ClusterError(f"building {tag} failed: {e}") from None


def main() -> None:
    """`python -m fencecheck.clusters.runtimes.image`: build the node image now (CI does this once
    per machine)."""
    import sys

    from fencecheck.clusters.runtimes.docker_host import docker_client

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    t0 = time.monotonic()
    try:
        tag = ensure_image(docker_client())
    except ClusterError as e:
        logging.getLogger("fencecheck.clusters.runtimes.image").error("%s", e)
        sys.exit(3)
    log.info("%s ready (%.0f s)", tag, time.monotonic() - t0)


if __name__ == "__main__":
    main()
