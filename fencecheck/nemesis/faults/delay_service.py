"""The `delay-service` fault: like `delay` (faults/delay.py), on the holder's traffic to the lock
service (every endpoint gets its own proxy port), so a renewal or release arrives late."""

from __future__ import annotations

from fencecheck.clusters.faults.delay import DelayPath
from fencecheck.descriptors.base import FaultDescriptor
from fencecheck.nemesis.faults.delay import RUNTIMES, DelayFault

DESCRIPTOR = FaultDescriptor(
    name="delay-service",
    factory="fencecheck.nemesis.faults.delay_service:DelayServiceFault",
    summary="hold the holder's traffic to the lock service past its lease, then deliver it",
    runtimes=RUNTIMES,
    options="fencecheck.nemesis.faults.base:HoldSettings",
)


class DelayServiceFault(DelayFault):
    name = "delay-service"
    path: DelayPath = "service"
