"""Images in the one-node cluster's containerd, with no registry: the sandbox image made here
from the pause program of the node build (an OCI archive of one file), and any image of the
host's dockerd (the Job's image, fencecheck/fleet/job_image.py) streamed from `docker save` into
`ctr images import`, both into the Kubernetes namespace (`k8s.io`) of the cluster's containerd.
Pods use them with `imagePullPolicy: Never` (the sandbox image is never pulled: containerd finds
it by name).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fencecheck.clusters.base import ClusterError

log = logging.getLogger(__name__)

NAMESPACE = "k8s.io"  # the CRI plugin's namespace: images elsewhere are invisible to pods
# The name examples/k8s/local/ gives the Job's image (the built one is tagged by its hash).
LOCAL_JOB_IMAGE = "fencecheck-job:local"


def sandbox_ref(version: str) -> str:
    return f"fencecheck.local/pause:{version}"


def ctr_argv(sock: Path, *args: str) -> list[str]:
    return ["ctr", "--address", str(sock), "--namespace", NAMESPACE, *args]


def _blob(tar: tarfile.TarFile, data: bytes) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
    return {"digest": f"sha256:{digest}", "size": len(data)}


def _file(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def pause_archive(pause: Path, ref: str) -> bytes:
    """An OCI image archive (image-spec 1.0 layout in a tar) of one layer holding `pause` as
    /pause, its entrypoint, named `ref` (containerd's import reads the name annotation)."""
    layer_buf = io.BytesIO()
    with tarfile.open(fileobj=layer_buf, mode="w") as layer:
        info = layer.gettarinfo(str(pause), arcname="pause")
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        with open(pause, "rb") as f:
            layer.addfile(info, f)
    layer_bytes = layer_buf.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    config = {"architecture": "amd64", "os": "linux",
              "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
              "rootfs": {"type": "layers", "diff_ids": [diff_id]}}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        lay = _blob(tar, layer_bytes)
        cfg = _blob(tar, json.dumps(config).encode())
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **cfg},
                    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **lay}]}
        man = _blob(tar, json.dumps(manifest).encode())
        index = {"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json", **man,
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": ref,
                            "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1]}}]}
        _file(tar, "index.json", json.dumps(index).encode())
        _file(tar, "oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
    return out.getvalue()


def _import(sock: Path, chunks: Iterable[bytes], what: str) -> None:
    argv = ctr_argv(sock, "images", "import", "-")
    log.debug("host: %s", argv)
    with tempfile.TemporaryFile() as said:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=said, stderr=said)
        assert proc.stdin is not None
        try:
            for chunk in chunks:
                proc.stdin.write(chunk)
        except BrokenPipeError:
            pass  # ctr stopped reading: its exit status and output say why
        finally:
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()
        code = proc.wait()
        said.seek(0)
        text = said.read().decode(errors="replace").strip()
    if code != 0:
        raise ClusterError(f"ctr images import of {what} exited {code}: {text[-500:]}")


def import_pause(sock: Path, pause: Path, ref: str) -> None:
    """Import the sandbox image into the cluster's containerd."""
    _import(sock, [pause_archive(pause, ref)], ref)


def import_docker_image(client: Any, tag: str, sock: Path) -> float:
    """Stream `docker save TAG` into the cluster's containerd; returns the seconds it took."""
    t0 = time.monotonic()
    image = client.images.get(tag)
    _import(sock, image.save(named=True), tag)
    took = time.monotonic() - t0
    log.info("imported %s into the cluster's containerd in %.1f s", tag, took)
    return took


def _docker_ref(name: str) -> str:
    """A docker-style short name as containerd (and the kubelet) spell it in full."""
    return name if "/" in name.split(":")[0] else f"docker.io/library/{name}"


def tag(sock: Path, source: str, target: str) -> None:
    """Name the image `source` also `target` (both as dockerd names them)."""
    res = subprocess.run(ctr_argv(sock, "images", "tag", "--force", _docker_ref(source),
                                  _docker_ref(target)), capture_output=True, text=True)
    if res.returncode != 0:
        raise ClusterError(f"ctr images tag {source} {target}: {res.stderr.strip()}")
