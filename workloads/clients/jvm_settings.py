"""Settings checks of the shipped Quartz and Spring Integration clients (their descriptors name
these as `settings_check`): the client options their programs read, refused before a run creates
anything (exit 3, naming the option) rather than by a program that exits at every start.

Quartz's lease: its cluster declares an instance failed, and takes over its firings, once
`last check-in + max(check-in interval, the checker's own time since its check-in) + 7500 ms`
has passed by the checker's clock (JobStoreSupport.calcFailedIfAfter; the 7.5 s are fixed in the
code). An instance that checks in on time fired its job at most one interval after its last
check-in, so a firing is its own for at least 7.5 s: a run's lease (the history's claim of how
long a grant is surely held) may not exceed that.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fencecheck.workloads.base import WorkloadError

QUARTZ_GRACE_MS = 7500
QUARTZ_MISFIRE = ("smart", "ignore", "fire-now", "now-with-existing-count",
                  "now-with-remaining-count", "next-with-existing-count",
                  "next-with-remaining-count")


def _millis(client: str, options: Mapping[str, Any], key: str, least: int = 1) -> int | None:
    value = options.get(key)
    if value is None:
        return None
    if type(value) is not int or value < least:
        raise WorkloadError(f"{client}: client option {key} must be an integer of ms >= {least}, "
                            f"not {value!r}")
    return value


def _flag(client: str, options: Mapping[str, Any], key: str) -> None:
    if key in options and type(options[key]) is not bool:
        raise WorkloadError(f"{client}: client option {key} must be true or false, "
                            f"not {options[key]!r}")


def check_quartz(options: Mapping[str, Any], lease_ms: int) -> None:
    """The `quartz` client's options (workloads/clients/java/quartz/QuartzClient.java)."""
    for key in ("check_in_ms", "misfire_threshold_ms", "interval_ms"):
        _millis("quartz", options, key)
    # StdSchedulerFactory refuses an idleWaitTime under a second
    _millis("quartz", options, "idle_wait_ms", least=1000)
    for key in ("requests_recovery", "acquire_within_lock"):
        _flag("quartz", options, key)
    misfire = options.get("misfire", "smart")
    if misfire not in QUARTZ_MISFIRE:
        raise WorkloadError(f"quartz: client option misfire must be one of "
                            f"{', '.join(QUARTZ_MISFIRE)}, not {misfire!r}")
    if lease_ms > QUARTZ_GRACE_MS:
        raise WorkloadError(
            f"quartz: a lease of {lease_ms} ms claims more than Quartz promises: its cluster may "
            f"take a firing over {QUARTZ_GRACE_MS} ms after it began (the fixed grace after a "
            f"check-in); use --lease-ms {QUARTZ_GRACE_MS} or less")


def check_spring(options: Mapping[str, Any], lease_ms: int) -> None:
    """The Spring Integration lock clients' options (workloads/clients/java/spring-integration/)."""
    client = "spring-integration"
    for key in ("idle_ms", "busy_wait_ms", "heartbeat_ms"):
        _millis(client, options, key)
    _flag(client, options, "auto_renew")
    region = options.get("region")
    if region is not None and (not isinstance(region, str) or not 0 < len(region) <= 100):
        raise WorkloadError(f"{client}: client option region must be a name of 1 to 100 "
                            f"characters (INT_LOCK.REGION), not {region!r}")


def check_spring_leader(options: Mapping[str, Any], lease_ms: int) -> None:
    """As `check_spring`, and the leader initiator's heartbeat inside the lease."""
    check_spring(options, lease_ms)
    heartbeat = options.get("heartbeat_ms", 500)
    if heartbeat >= lease_ms:
        raise WorkloadError(
            f"spring-integration: the leader initiator's heartbeat ({heartbeat} ms, client option "
            f"heartbeat_ms) must be shorter than the lease ({lease_ms} ms), the registry's TTL: "
            "it takes the lock again once a heartbeat")
