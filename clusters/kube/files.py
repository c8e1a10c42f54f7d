"""Where a one-node cluster keeps everything (`Layout`), and the contents of its configuration
files, as pure functions of the layout: containerd's config.toml, the bridge CNI's conflist, the
kubelet's KubeletConfiguration and the kubeconfigs of the components.

Every name a cluster makes carries its run id, so that the cleaner finds it again with no live
object: the node's network namespace `fc-<run>-kube` (the netns runtime's scheme, so `fencecheck
teardown --all` finds an orphan), the host's end of its veth `fck<run>h`, the kubelet's cgroup
root `/fencecheck-kube-<run>` in every cgroup v1 hierarchy, the folder `<base>/<run>/` with
every socket, state and data directory of etcd, containerd and the kubelet.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

DEFAULT_BASE = Path("/var/lib/fencecheck/kube")
# The pods' range, inside the node's network namespace only (the host never routes to it).
POD_SUBNET = "10.244.0.0/24"
POD_GATEWAY = "10.244.0.1"
SERVICE_CIDR = "10.96.0.0/24"
BRIDGE = "fckbr0"  # inside the node's namespace: one name serves every cluster
APISERVER_PORT = 6443
KUBELET_PORT = 10250
ETCD_PORT = 2379


@dataclass(frozen=True, slots=True)
class Layout:
    """The names and paths of one cluster (run id `run`), under `base/<run>/`. `host_ip` and
    `node_ip` are the two ends of the veth between the host and the node's namespace (a /30):
    the API server and the kubelet listen on `node_ip`."""

    run: str
    base: Path
    host_ip: str
    node_ip: str

    @property
    def dir(self) -> Path:
        return self.base / self.run

    @property
    def netns(self) -> str:
        return f"fc-{self.run}-kube"

    @property
    def host_veth(self) -> str:
        return f"fck{self.run}h"  # at most 10 characters (15 allowed)

    @property
    def node_veth(self) -> str:
        return f"fck{self.run}n"

    @property
    def node_name(self) -> str:
        return f"fencecheck-{self.run}"

    @property
    def cgroup_root(self) -> str:
        return f"/fencecheck-kube-{self.run}"

    @property
    def pki(self) -> Path:
        return self.dir / "pki"

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    @property
    def containerd_root(self) -> Path:
        return self.dir / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        return self.dir / "containerd" / "state"

    @property
    def containerd_sock(self) -> Path:
        return self.dir / "containerd" / "containerd.sock"

    @property
    def kubelet_root(self) -> Path:
        return self.dir / "kubelet"

    @property
    def cni_conf_dir(self) -> Path:
        return self.dir / "cni" / "net.d"

    @property
    def cni_data_dir(self) -> Path:
        return self.dir / "cni" / "ipam"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.dir / "admin.kubeconfig"

    @property
    def server(self) -> str:
        return f"https://{self.node_ip}:{APISERVER_PORT}"

    def mount_roots(self) -> tuple[Path, ...]:
        """Every folder under which the node mounts things (volumes, container root file
        systems, sandboxes' shm and network namespaces): the sweep unmounts below them."""
        return (self.dir,)


def cni_network(layout: Layout) -> str:
    """The CNI network's name: libcni's cached results on the host are named after it."""
    return f"fc-kube-{layout.run}"


def containerd_config(layout: Layout, sandbox_image: str, runc: str = "/usr/sbin/runc") -> str:
    """containerd 1.6's config.toml (version 2): its own root, state and socket; the CRI plugin
    with runc under the cgroupfs driver (no systemd on this host), the sandbox image imported
    beforehand (no registry), the pods' network namespaces mounted under its state folder (not
    /run/netns, which other runs list), and the bridge CNI from Debian's plugins. Out-of-memory
    scores are never set below containerd's own (`restrict_oom_score_adj`): this host's
    capability bounding set lacks CAP_SYS_RESOURCE, so runc could not give a pod's sandbox the
    -998 the kubelet asks for (`failed to update /proc/self/oom_score_adj: Permission denied`)."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{layout.containerd_root}"
state = "{layout.containerd_state}"
oom_score = 0

[grpc]
  address = "{layout.containerd_sock}"

[ttrpc]
  address = "{layout.containerd_sock}.ttrpc"

[debug]
  level = "info"

[{cri}]
  sandbox_image = "{sandbox_image}"
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
  stream_server_address = "{layout.node_ip}"
  stream_server_port = "0"
  enable_selinux = false
  max_container_log_line_size = 16384

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
  discard_unpacked_layers = false

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  BinaryName = "{runc}"
  Root = "{layout.containerd_state}/runc"
  SystemdCgroup = false

[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{layout.cni_conf_dir}"
  max_conf_num = 1

[plugins."io.containerd.internal.v1.opt"]
  path = "{layout.dir}/containerd/opt"
"""


# Debian's containernetworking-plugins; docker.io brings containerd and runc but not these.
CNI_BIN_DIR = Path("/usr/lib/cni")
CNI_PLUGINS = ("bridge", "host-local", "loopback")  # the conflist's, and containerd's lo
CNI_PACKAGE = "containernetworking-plugins"


def missing_cni_plugins(bin_dir: Path = CNI_BIN_DIR) -> list[str]:
    """The CNI plugins the pods' network needs that are not in `bin_dir`. Without them the
    node still turns Ready (it needs the config, not the programs) and every pod sandbox then
    fails (`failed to find plugin "bridge"`), so the cluster checks before it starts."""
    return [name for name in CNI_PLUGINS if not (bin_dir / name).is_file()]


def cni_conflist(layout: Layout) -> str:
    """The bridge plugin (a gateway on the node's bridge, no masquerading: the pods need no
    way out) with host-local addresses kept in the cluster's folder, and loopback."""
    return json.dumps({
        "cniVersion": "1.0.0",
        "name": cni_network(layout),
        "plugins": [
            {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False,
             "hairpinMode": True,
             "ipam": {"type": "host-local", "dataDir": str(layout.cni_data_dir),
                      "ranges": [[{"subnet": POD_SUBNET, "gateway": POD_GATEWAY}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
        ],
    }, indent=2)


def kubelet_config(layout: Layout, ca_file: Path) -> str:
    """KubeletConfiguration (JSON is YAML). What this host needs: `failCgroupV1: false` (the
    host's layout is hybrid cgroup v1, which kubelet 1.35+ refuses by default), the cgroupfs
    driver (PID 1 is not systemd), a cgroup root of the cluster's own; and what a test node
    wants: no eviction or image garbage collection on a shared disk (they would remove the
    imported image), webhook authentication and authorization against the API server."""
    return json.dumps({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": layout.node_ip,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(ca_file)}},
        "authorization": {"mode": "Webhook"},
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": layout.cgroup_root,
        "containerRuntimeEndpoint": f"unix://{layout.containerd_sock}",
        "failSwapOn": False,
        "evictionHard": {"memory.available": "1Mi", "nodefs.available": "0%",
                         "imagefs.available": "0%", "nodefs.inodesFree": "0%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "resolvConf": "/etc/resolv.conf",
        "serializeImagePulls": False,
        "maxPods": 30,
        "podPidsLimit": -1,
        "volumePluginDir": str(layout.dir / "kubelet-plugins"),
        "podLogsDir": str(layout.dir / "pod-logs"),
        "runtimeRequestTimeout": "10m",
        "shutdownGracePeriod": "0s",
        "containerLogMaxSize": "10Mi",
        "logging": {"format": "text"},
    }, indent=2)


def kubeconfig(server: str, ca_file: Path, token: str, user: str) -> str:
    """A kubeconfig with one cluster, one user (a bearer token) and one context."""
    return json.dumps({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fencecheck", "cluster": {"server": server,
                                                        "certificate-authority": str(ca_file)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "fencecheck", "context": {"cluster": "fencecheck", "user": user}}],
        "current-context": "fencecheck",
    }, indent=2)
