"""The command lines of the one-node cluster's daemons, as pure functions of its layout and
credentials: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd and the
kubelet. Each runs in the node's network namespace (cluster.py puts the `nsenter` in front), so
the control plane's own ports are on that namespace's loopback and collide with nothing on the
host; the API server and the kubelet listen on the node's address, which the host reaches over
the cluster's veth.

The kubelet runs in a mount namespace of its own in which the six kernel settings it insists on
(vm.overcommit_memory, vm.panic_on_oom, kernel.panic, kernel.panic_on_oops and the root key
quotas) read as it wants them: without that it would *write* them, machine-wide, on a machine
other runs share (`protectKernelDefaults: false`, the default), or refuse to start
(`protectKernelDefaults: true`, since this host's values differ). Its root folder is a shared
bind mount, so the volumes it mounts there propagate back to the host's namespace, where
containerd gives them to the containers.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from fencecheck.clusters.kube.files import (
    APISERVER_PORT,
    ETCD_PORT,
    SERVICE_CIDR,
    Layout,
)
from fencecheck.clusters.services.kube_certs import KubeCredentials

# The identities of the components: (user, groups) of their tokens, as kubeadm names them, so
# that the API server's bootstrap RBAC roles and the Node authorizer apply.
SCHEDULER = ("system:kube-scheduler", "")
CONTROLLER_MANAGER = ("system:kube-controller-manager", "")
KUBELET_CLIENT = ("apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters")

# What kubelet 1.37 checks at start (pkg/kubelet/cm/container_manager_linux.go,
# setupKernelTunables), and wants.
KERNEL_TUNABLES = {
    "vm/overcommit_memory": 1,
    "vm/panic_on_oom": 0,
    "kernel/panic": 10,
    "kernel/panic_on_oops": 1,
    "kernel/keys/root_maxkeys": 1000000,
    "kernel/keys/root_maxbytes": 25000000,
}


def node_user(layout: Layout) -> tuple[str, str]:
    return (f"system:node:{layout.node_name}", "system:nodes")


def etcd(layout: Layout) -> list[str]:
    data = layout.dir / "etcd"
    return ["etcd", "--name", "kube", f"--data-dir={data}",
            f"--listen-client-urls=http://127.0.0.1:{ETCD_PORT}",
            f"--advertise-client-urls=http://127.0.0.1:{ETCD_PORT}",
            "--listen-peer-urls=http://127.0.0.1:2380",
            "--initial-advertise-peer-urls=http://127.0.0.1:2380",
            "--initial-cluster=kube=http://127.0.0.1:2380",
            # a slow shared disk: a missed heartbeat must not look like a lost leader
            "--heartbeat-interval=500", "--election-timeout=5000",
            "--logger=zap", "--log-outputs=stderr"]


def apiserver(binary: Path, layout: Layout, c: KubeCredentials) -> list[str]:
    kubelet_cert, kubelet_key = c.client_certs[KUBELET_CLIENT[0]]
    return [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{ETCD_PORT}",
        f"--bind-address={layout.node_ip}",
        f"--advertise-address={layout.node_ip}",
        f"--secure-port={APISERVER_PORT}",
        f"--tls-cert-file={c.cert_file}",
        f"--tls-private-key-file={c.key_file}",
        f"--client-ca-file={c.ca_file}",
        f"--token-auth-file={c.token_file}",
        f"--service-account-key-file={c.sa_key_file}",
        f"--service-account-signing-key-file={c.sa_key_file}",
        "--service-account-issuer=https://fencecheck.invalid",
        f"--kubelet-client-certificate={kubelet_cert}",
        f"--kubelet-client-key={kubelet_key}",
        # to the kubelet (logs, exec) by the node's address: its name is in no DNS
        "--kubelet-preferred-address-types=InternalIP",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--allow-privileged=true",  # the Job's pods are privileged
        "--endpoint-reconciler-type=none",  # no kube-proxy, no Service traffic
        "--profiling=false",
    ]


def controller_manager(binary: Path, layout: Layout, c: KubeCredentials) -> list[str]:
    return [str(binary), f"--kubeconfig={layout.dir / 'controller-manager.kubeconfig'}",
            "--bind-address=127.0.0.1", "--leader-elect=false",
            f"--service-account-private-key-file={c.sa_key_file}",
            f"--root-ca-file={c.ca_file}",
            # each controller as its own service account, as kubeadm runs it: the bootstrap
            # role of system:kube-controller-manager alone cannot, e.g., make a Job's pods
            "--use-service-account-credentials=true",
            # no cloud, no node IPAM (the bridge CNI hands out addresses), no certificates
            "--controllers=*,-nodeipam,-csrsigning,-csrapproving,-csrcleaner",
            "--profiling=false"]


def scheduler(binary: Path, layout: Layout) -> list[str]:
    return [str(binary), f"--kubeconfig={layout.dir / 'scheduler.kubeconfig'}",
            "--bind-address=127.0.0.1", "--leader-elect=false", "--profiling=false"]


def containerd(layout: Layout) -> list[str]:
    return ["containerd", "--config", str(layout.dir / "containerd" / "config.toml")]


def kubelet(binary: Path, layout: Layout) -> list[str]:
    """The kubelet, behind `unshare --mount` and the settings it reads (module docstring). In
    its mount namespace /var/log is the cluster's own folder too: the kubelet keeps its
    /var/log/containers links there (a path it does not let anyone configure)."""
    fakes = layout.dir / "sysctl"
    binds = [f"mount --bind {shlex.quote(str(fakes / k.replace('/', '.')))} /proc/sys/{k}"
             for k in KERNEL_TUNABLES]
    varlog = shlex.quote(str(layout.dir / "varlog"))
    argv = [str(binary), f"--config={layout.dir / 'kubelet.json'}",
            f"--kubeconfig={layout.dir / 'kubelet.kubeconfig'}",
            f"--root-dir={layout.kubelet_root}", f"--hostname-override={layout.node_name}",
            f"--node-ip={layout.node_ip}", "--v=1"]
    # What is bound here must not propagate to the host: /proc (recursively: the kubelet's
    # root folder is another mount, still shared) and the mount /var/log lives on are made
    # private in this namespace first.
    script = " && ".join([
        "mount --make-rprivate /proc", *binds,
        'mount --make-private "$(findmnt -n -o TARGET --target /var/log)"',
        f"mount --bind {varlog} /var/log",
        "exec " + shlex.join(argv)])
    return ["unshare", "--mount", "--propagation", "unchanged", "sh", "-c", script]


def kernel_tunable_files(layout: Layout) -> dict[Path, str]:
    """The files bound over /proc/sys in the kubelet's mount namespace."""
    return {layout.dir / "sysctl" / k.replace("/", "."): f"{v}\n"
            for k, v in KERNEL_TUNABLES.items()}
