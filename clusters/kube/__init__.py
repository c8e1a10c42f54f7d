"""A one-node Kubernetes cluster of fencecheck's own making, for the nightly's Indexed Job
(examples/k8s/, docs/nightly.md): `cluster` (LocalKube: up, down), `components` (the daemons'
command lines), `files` (names, paths and configuration files), `images` (the sandbox image and
images from dockerd, imported into containerd), `sweep` (what a cluster leaves on the host,
removed by its recorded names), `node_build` (kubelet, scheduler, controller manager, kubectl and
pause, built from the Kubernetes Go modules)."""
