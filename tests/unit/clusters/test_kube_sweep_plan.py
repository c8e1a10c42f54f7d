"""The order the one-node cluster's sweep (fencecheck/clusters/kube/sweep.py) unmounts in, from a
mountinfo text: only what is at or below the cluster's folder (not a sibling sharing its prefix),
escaped names decoded, each point once (a stacked mount), deepest first so that no unmount is
refused for a mount still under it."""

from __future__ import annotations

from pathlib import Path

from fencecheck.clusters.kube.sweep import points_under

ROOT = Path("/var/lib/fencecheck/kube/a1b2c3")


def _line(n: int, point: str) -> str:
    return f"{n} 1 0:{n} / {point} rw,relatime shared:{n} - tmpfs tmpfs rw"


def test_the_sweep_unmounts_only_its_own_deepest_first() -> None:
    points = [
        "/",
        f"{ROOT}/kubelet",  # the kubelet's shared root, the bind `up` made
        f"{ROOT}/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/results",
        f"{ROOT}/containerd/state/io.containerd.grpc.v1.cri/sandboxes/s1/shm",
        f"{ROOT}/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/results",  # stacked twice
        f"{ROOT}/run/netns/cni-1",
        "/var/lib/fencecheck/kube/a1b2c3d4/kubelet",  # another cluster, same prefix
        "/var/lib/fencecheck/kube/other",
        f"{ROOT}/containerd/rootfs/with\\040space",  # mountinfo escapes a space
    ]
    text = "\n".join(_line(i, p) for i, p in enumerate(points, 20))
    got = points_under(text, ROOT)
    assert got == [
        ROOT / "containerd/state/io.containerd.grpc.v1.cri/sandboxes/s1/shm",
        ROOT / "kubelet/pods/u1/volumes/kubernetes.io~empty-dir/results",
        ROOT / "containerd/rootfs/with space",
        ROOT / "run/netns/cni-1",
        ROOT / "kubelet",
    ]
    assert all(p.is_relative_to(ROOT) for p in got)


def test_the_folder_itself_when_it_is_a_mount() -> None:
    assert points_under(_line(1, str(ROOT)), ROOT) == [ROOT]
    assert points_under(_line(1, str(ROOT) + "x"), ROOT) == []
