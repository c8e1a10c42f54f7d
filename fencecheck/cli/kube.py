"""`fencecheck kube up` and `fencecheck kube image`: the one-node Kubernetes cluster of
fencecheck/clusters/kube/ for trying the nightly's Indexed Job locally (docs/nightly.md), and the
image that Job runs (fencecheck/fleet/job_image.py).

`kube up` runs in the foreground: it brings the cluster up, imports the Job's image, prints the
kubeconfig, kubectl and the image's name, and holds the cluster until Ctrl-C or SIGTERM, then
takes it down. A cluster whose `kube up` was killed is removed with `fencecheck teardown --run
ID` (or `--all`), like a run.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Annotated

import typer

from fencecheck.cli.group import console, shown

out = console()
err = console(stderr=True, soft_wrap=True)
BAD_INPUT = 3

kube = typer.Typer(no_args_is_help=True, add_completion=False,
                   help="A one-node Kubernetes cluster on this machine for the nightly's Job.")


def _fail(message: str) -> typer.Exit:
    err.print(f"[bold red]error:[/] {shown(message)}")
    return typer.Exit(BAD_INPUT)


@kube.command("image")
def image() -> None:
    """Build the Job's image in the host's dockerd and print its name."""
    from fencecheck.clusters.base import ClusterError
    from fencecheck.clusters.runtimes.docker_host import docker_client
    from fencecheck.fleet.job_image import ensure_job_image

    try:
        out.print(ensure_job_image(docker_client()))
    except ClusterError as e:
        raise _fail(str(e)) from None


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


@kube.command("up")
def up(
    base: Annotated[Path, typer.Option(help="where clusters keep their files")] = Path(
        "/var/lib/fencecheck/kube"),
    with_image: Annotated[bool, typer.Option(
        "--image/--no-image", help="build (if needed) and import the Job's image")] = True,
    hold: Annotated[bool, typer.Option(
        "--hold/--no-hold", help="hold the cluster until Ctrl-C (--no-hold: take it down at "
                                 "once, to time the start)")] = True,
) -> None:
    """Start the cluster, print how to reach it, hold it until Ctrl-C, take it down."""
    from fencecheck.clusters.base import ClusterError
    from fencecheck.clusters.kube import node_build
    from fencecheck.clusters.kube.cluster import LocalKube

    signal.signal(signal.SIGTERM, _interrupt)  # as Ctrl-C: whatever is under way unwinds
    kube_ = LocalKube(base)
    try:
        t0 = time.monotonic()
        kube_.up()
        ready = time.monotonic() - t0
        name = _import(kube_) if with_image else None
        lay = kube_.layout
        assert lay is not None
        out.print(f"fencecheck kube: cluster {lay.run} ready in {ready:.1f} s", soft_wrap=True)
        out.print(f"  export KUBECONFIG={shown(lay.admin_kubeconfig)}", soft_wrap=True)
        out.print(f"  kubectl: {shown(node_build.binary('kubectl'))}", soft_wrap=True)
        if name is not None:
            out.print(f"  image: {shown(name)}, also fencecheck-job:local (imagePullPolicy: "
                      "Never)", soft_wrap=True)
        if hold:
            out.print("  Ctrl-C takes it down")
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        pass
    except ClusterError as e:
        raise _fail(str(e)) from None
    finally:
        kube_.down()
        out.print(f"fencecheck kube: down in {kube_.timings.get('down_s', 0.0):.1f} s")


def _import(kube_: object) -> str:
    from fencecheck.clusters.kube import images
    from fencecheck.clusters.kube.cluster import LocalKube
    from fencecheck.clusters.runtimes.docker_host import docker_client
    from fencecheck.fleet.job_image import ensure_job_image

    assert isinstance(kube_, LocalKube) and kube_.layout is not None
    client = docker_client()
    tag = ensure_job_image(client)
    images.import_docker_image(client, tag, kube_.layout.containerd_sock)
    images.tag(kube_.layout.containerd_sock, tag, images.LOCAL_JOB_IMAGE)
    return tag


def register(app: typer.Typer) -> None:
    """Add `kube` (up, image) to the CLI."""
    app.add_typer(kube, name="kube")
