"""The one-node cluster's names, configuration files and command lines (fencecheck/clusters/kube/:
files.py, components.py), its sandbox image archive (images.py) and the extra credentials it
asks of kube_certs: every file parses as its reader will read it, everything the host shares
(cgroups, sockets, logs, CNI state) is named after the run and kept in the cluster's folder,
and the kubelet's settings are those this host needs."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tomllib
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import NameOID

from fencecheck.clusters.kube import components, files, images, node_build
from fencecheck.clusters.kube.files import Layout
from fencecheck.clusters.reaper import NETNS_NAME_RE
from fencecheck.clusters.services import kube_build
from fencecheck.clusters.services.kube_certs import make_credentials

LAYOUT = Layout("a1b2c3", Path("/var/lib/fencecheck/kube"), "10.254.0.1", "10.254.0.2")


def _under(path: str | Path) -> bool:
    return Path(path).is_relative_to(LAYOUT.dir)


def test_names_carry_the_run_and_fit_the_kernel() -> None:
    m = NETNS_NAME_RE.match(LAYOUT.netns)
    assert m is not None and m.group(1) == LAYOUT.run  # `teardown --all` finds an orphan
    assert len(LAYOUT.host_veth) <= 15 and len(LAYOUT.node_veth) <= 15
    assert LAYOUT.run in LAYOUT.cgroup_root and LAYOUT.run in files.cni_network(LAYOUT)
    assert LAYOUT.server == "https://10.254.0.2:6443"


def test_kubelet_settings_for_this_host() -> None:
    c = json.loads(files.kubelet_config(LAYOUT, LAYOUT.pki / "ca.crt"))
    assert c["kind"] == "KubeletConfiguration"
    assert c["failCgroupV1"] is False and c["cgroupDriver"] == "cgroupfs"
    assert c["cgroupRoot"] == LAYOUT.cgroup_root
    assert c["containerRuntimeEndpoint"] == f"unix://{LAYOUT.containerd_sock}"
    assert _under(c["podLogsDir"]) and _under(c["volumePluginDir"])
    # no eviction or image garbage collection: they would remove the imported image
    assert set(c["evictionHard"].values()) <= {"0%", "1Mi"}
    assert c["imageGCHighThresholdPercent"] == 100
    assert c["authentication"]["anonymous"]["enabled"] is False
    assert c["address"] == LAYOUT.node_ip and c["readOnlyPort"] == 0


def test_containerd_keeps_everything_in_the_cluster_folder() -> None:
    c = tomllib.loads(files.containerd_config(LAYOUT, "fencecheck.local/pause:v1"))
    assert all(_under(c[k]) for k in ("root", "state"))
    assert _under(c["grpc"]["address"]) and _under(c["ttrpc"]["address"])
    cri = c["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "fencecheck.local/pause:v1"
    assert cri["netns_mounts_under_state_dir"] is True  # not /run/netns
    # no CAP_SYS_RESOURCE here: a sandbox's -998 is refused, so no score below containerd's
    assert cri["restrict_oom_score_adj"] is True and c["oom_score"] == 0
    runc = cri["containerd"]["runtimes"]["runc"]
    assert runc["options"]["SystemdCgroup"] is False and _under(runc["options"]["Root"])
    assert _under(cri["cni"]["conf_dir"]) and cri["cni"]["bin_dir"] == "/usr/lib/cni"


def test_the_bridge_network() -> None:
    c = json.loads(files.cni_conflist(LAYOUT))
    assert c["name"] == files.cni_network(LAYOUT)
    bridge = c["plugins"][0]
    assert bridge["type"] == "bridge" and bridge["ipMasq"] is False  # no NAT rules anywhere
    assert _under(bridge["ipam"]["dataDir"])


def test_the_kubelet_reads_the_kernel_settings_it_wants_without_writing_them() -> None:
    argv = components.kubelet(Path("/cache/kubelet"), LAYOUT)
    assert argv[:4] == ["unshare", "--mount", "--propagation", "unchanged"]
    script = argv[-1]
    steps = script.split(" && ")
    assert steps[0] == "mount --make-rprivate /proc"  # before anything is bound over it
    fakes = components.kernel_tunable_files(LAYOUT)
    assert len(fakes) == len(components.KERNEL_TUNABLES) == 6
    for key, value in components.KERNEL_TUNABLES.items():
        assert any(s.endswith(f" /proc/sys/{key}") for s in steps[1:7])
        assert fakes[LAYOUT.dir / "sysctl" / key.replace("/", ".")] == f"{value}\n"
    assert steps[-1].startswith("exec /cache/kubelet ")
    assert f"--root-dir={LAYOUT.kubelet_root}" in steps[-1]


def test_kubeconfig() -> None:
    k = json.loads(files.kubeconfig(LAYOUT.server, Path("/ca.crt"), "t0k", "system:kube-x"))
    assert k["clusters"][0]["cluster"]["server"] == LAYOUT.server
    assert k["users"][0]["user"]["token"] == "t0k"


def test_the_sandbox_image_archive(tmp_path: Path) -> None:
    pause = tmp_path / "pause"
    pause.write_bytes(b"\x7fELF not really")
    pause.chmod(0o755)
    data = images.pause_archive(pause, "fencecheck.local/pause:v1.37.2")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        blobs = {m.name: tar.extractfile(m).read() for m in tar.getmembers()  # type: ignore[union-attr]
                 if m.isfile()}
    for name, body in blobs.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(body).hexdigest() == name.rsplit("/", 1)[1]
    index = json.loads(blobs["index.json"])
    entry = index["manifests"][0]
    assert entry["annotations"]["io.containerd.image.name"] == "fencecheck.local/pause:v1.37.2"
    manifest = json.loads(blobs["blobs/sha256/" + entry["digest"].split(":")[1]])
    config = json.loads(blobs["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]])
    assert config["config"]["Entrypoint"] == ["/pause"]
    layer = blobs["blobs/sha256/" + manifest["layers"][0]["digest"].split(":")[1]]
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
    with tarfile.open(fileobj=io.BytesIO(layer)) as lt:
        (member,) = lt.getmembers()
        assert member.name == "pause" and member.mode & 0o111


def test_component_tokens_and_the_kubelet_client_certificate(tmp_path: Path) -> None:
    users = [components.SCHEDULER, components.node_user(LAYOUT)]
    c = make_credentials(tmp_path, [LAYOUT.node_ip], users=users,
                         clients=[components.KUBELET_CLIENT])
    lines = c.token_file.read_text().splitlines()
    assert lines[0].endswith(",system:masters") and len(lines) == 3
    node, groups = components.node_user(LAYOUT)
    assert f'{c.tokens[node]},{node},{node},"{groups}"' in lines
    assert len(set(c.tokens.values()) | {c.token}) == 3
    crt, key = c.client_certs[components.KUBELET_CLIENT[0]]
    cert = x509.load_pem_x509_certificate(crt.read_bytes())
    ca = x509.load_pem_x509_certificate(c.ca_file.read_bytes())
    assert cert.issuer == ca.subject and key.exists()
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == \
        "system:masters"
    # the API server reaches the kubelet (kubectl logs) with that certificate, by the node's IP
    argv = components.apiserver(Path("/cache/kube-apiserver"), LAYOUT, c)
    assert f"--kubelet-client-certificate={crt}" in argv
    assert "--kubelet-preferred-address-types=InternalIP" in argv
    # what the kubernetes backend asks for is unchanged: one token, no client certificates
    plain = make_credentials(tmp_path / "plain", ["127.0.0.1"])
    assert plain.tokens == {} and plain.client_certs == {}
    assert len(plain.token_file.read_text().splitlines()) == 1


def test_the_node_build_pins_the_api_servers_release() -> None:
    """The kubelet and the rest are the API server's own release: no version skew at all."""
    def replaces(gomod: Path) -> list[str]:
        text = gomod.read_text()
        return sorted(line.strip() for line in text[text.index("replace ("):].splitlines()
                      if "=>" in line)

    assert node_build.version() == kube_build.version()
    assert replaces(node_build.MODULE / "go.mod") == replaces(kube_build.MODULE / "go.mod")
    gomod = (node_build.MODULE / "go.mod").read_text()
    for command in node_build.COMMANDS:
        assert f"\tk8s.io/kubernetes/cmd/{command}\n" in gomod  # a `tool` line: go.sum has it
    steps = node_build.steps(Path("/b"))
    assert [s[-1] for s in steps[:4]] == [f"k8s.io/kubernetes/cmd/{c}" for c in
                                           node_build.COMMANDS]
    assert "build/pause/linux/pause.c" in steps[-1][-1]


def test_missing_cni_plugins_are_named(tmp_path: Path) -> None:
    (tmp_path / "bridge").write_text("")
    assert files.missing_cni_plugins(tmp_path) == ["host-local", "loopback"]
    for name in files.CNI_PLUGINS:
        (tmp_path / name).write_text("")
    assert files.missing_cni_plugins(tmp_path) == []
    c = tomllib.loads(files.containerd_config(LAYOUT, "fencecheck.local/pause:v1"))
    cri = c["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["cni"]["bin_dir"] == str(files.CNI_BIN_DIR)
