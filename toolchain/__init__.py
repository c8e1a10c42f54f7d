"""The toolchain of the programs fencecheck builds for itself (the shipped clients of
workloads/clients/ and the kubernetes backend's kube-apiserver): the per-machine build cache and
the one runner that builds into it. Stdlib only, and it imports no other package of the project,
so that `clusters` and `workloads` can both use it."""
