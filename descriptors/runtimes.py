"""The built-in runtimes: where a run's nodes come from (`--runtime`). Each is data: its class,
and the model of its own options (`--runtime-opt`); see docs/extending.md."""

from __future__ import annotations

from fencecheck.descriptors.base import RuntimeDescriptor

RUNTIMES: tuple[RuntimeDescriptor, ...] = (
    RuntimeDescriptor(
        "netns", "fencecheck.clusters.runtimes.netns:NetnsRuntime",
        summary="network namespaces on this host (root; the default)",
        options="fencecheck.clusters.runtimes.options:NetnsOptions",
    ),
    RuntimeDescriptor(
        "docker", "fencecheck.clusters.runtimes.docker:DockerRuntime",
        summary="containers on an internal Docker network",
        options="fencecheck.clusters.runtimes.options:DockerOptions",
    ),
    RuntimeDescriptor(
        "ssh", "fencecheck.clusters.runtimes.ssh:SshRuntime",
        summary="existing machines over ssh (servers first)",
        options="fencecheck.clusters.runtimes.options:SshOptions",
        local_resource=True,  # the resource runs on the controller
    ),
)
