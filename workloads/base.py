"""Protocols of the client side: lock clients and the resource a lock protects.

Clients never retry behind the history's back: one call is one operation. A refusal that surely
did not take effect raises `DefiniteFailure` (recorded `fail`); anything uncertain (a timeout, a
connection lost mid-request) raises `Indeterminate` (recorded `info`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


class WorkloadError(Exception):
    """Root error of the workloads package."""


class DefiniteFailure(WorkloadError):
    """The operation surely did not happen. `error` is the short code the history records;
    `evidence`, what the library was seen doing (workloads/evidence.py), joins the completion
    value."""

    def __init__(self, error: str, detail: str = "",
                 evidence: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"{error}: {detail}" if detail else error)
        self.error = error
        self.evidence = evidence


class Indeterminate(WorkloadError):
    """The operation may or may not have happened (`evidence` as for DefiniteFailure)."""

    def __init__(self, error: str, detail: str = "",
                 evidence: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"{error}: {detail}" if detail else error)
        self.error = error
        self.evidence = evidence


class StaleToken(DefiniteFailure):
    """The resource's fence refused a request with a lower token than it has seen."""

    def __init__(self, detail: str = "") -> None:
        super().__init__("stale-token", detail)


@dataclass(frozen=True, slots=True)
class Grant:
    """A held lock. `token` is the fencing token, or None where the backend has none; `handle`
    is the client's private state (owner value, lease id, recipe object); `evidence` is what
    the service reported doing beyond the grant (a careless renew names the lock it extended),
    merged into the operation's ok value (a library's own steps go under its "evidence" key:
    workloads/evidence.py)."""

    lock: str
    token: int | None
    lease_ms: int
    handle: Any = None
    # time.monotonic_ns() when the winning attempt was sent, for clients that retry inside one
    # acquire: the lease cannot have started before it (the checker counts from it)
    attempt_ns: int | None = None
    evidence: Mapping[str, Any] | None = None


class LockClient(Protocol):
    """One lock client inside one worker process."""

    name: str

    def acquire(self, lock: str, lease_ms: int, timeout_s: float) -> Grant:
        """Take the lock, waiting at most timeout_s. Raises DefiniteFailure if it surely was not
        granted (held by another until the timeout, refused), Indeterminate if unknown."""
        ...

    def renew(self, grant: Grant, lease_ms: int) -> Grant:
        """Extend the lease. DefiniteFailure if the lock is surely no longer ours."""
        ...

    def release(self, grant: Grant) -> Mapping[str, Any] | None:
        """Give the lock up (only if still ours). May return evidence of what it removed (a
        careless release names the lock it deleted), recorded in the ok value."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Careless(Protocol):
    """A client that skips some of a lock's disciplines on purpose (workloads/clients/careless.py);
    `careless` names the skipped steps, which the worker follows too (it keeps working after a
    failed renewal only if "work-after-failed-renew" is among them)."""

    careless: frozenset[str]


@runtime_checkable
class SectionHost(Protocol):
    """A client whose critical sections run in processes of their own, which a lock tool
    supervises (`consul lock` runs a child while it holds the lock and kills it when it sees the
    lock lost): the worker's reads and writes under its grants are carried out there
    (workloads/clients/child_section.py)."""

    def host_sections(self, resource: str, options: Mapping[str, Any],
                      direct: Resource) -> Resource:
        """The resource the worker uses instead of `direct`: a request under one of this
        client's grants goes to that grant's process (built from the resource's name and
        options); anything else to `direct`."""
        ...


class Resource(Protocol):
    """What the lock protects: integer values under string keys, each request carrying the
    token (None where the backend has none)."""

    name: str

    def read(self, key: str, token: int | None, lock: str) -> int | None: ...

    def write(self, key: str, value: int, token: int | None, lock: str) -> None:
        """Raises StaleToken when the fence refuses the write."""
        ...

    def close(self) -> None: ...
