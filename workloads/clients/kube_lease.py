"""`KubernetesPythonClient` ("kubernetes-python"): the `kubernetes` PyPI client's leader election
(`kubernetes.leaderelection`) over a Lease, on the `kubernetes` backend, for the `lock` and
`leader` workloads. The lock name is the Lease's name; the token is the Lease's resourceVersion
written by the winning create or update.

The library's `LeaderElection.run` blocks for a whole term (acquire loop, renew loop, callbacks),
which leaves no room for the history's operations, so the client drives the library's own step,
`LeaderElection.try_acquire_or_renew` (read the Lease, decide with the library's rules and its
wall-clock observation time, create or replace it through `LeaseLock`), one call per attempt:
- acquire: a fresh candidate (a `LeaderElection` with its own identity) tries every
  `retry_period` until it leads or the acquire's timeout passes. A fresh identity per acquire:
  the library lets a candidate whose identity is still the holder take the Lease at once, which
  would hand a worker's new term the lease of a term the history already retired.
- renew: the same candidate's `try_acquire_or_renew` once (the library's renew loop retries
  until `renew_deadline`; here a retry is a new operation, so `renew_deadline` only takes part in
  the library's validation of the settings).
- release: the library has none; as client-go's ReleaseOnCancel does, the holder writes the
  Lease with no holder and a 1 s duration (through `LeaseLock.update`, so a conflicting write is
  refused by resourceVersion), after reading that it is still the holder.

What the library leaves out and this module adds, without changing its decisions: every request
has the operation's timeout (the library sets none), urllib3's hidden retries are off, and the
`CoordinationV1Api` the library's `LeaseLock` calls is wrapped to keep the object a write
returned (the library drops it on update: that is where the token comes from) and to tell a write
refused by the server (a definite failure) from one whose outcome is unknown (timeout, lost
connection, a 5xx), which the library's `update` swallows alike.

Options (besides `endpoints`, `worker`, `op_timeout_s`; the backend gives the `k8s_*` ones):
`k8s_token`, `k8s_ca_file`, `k8s_namespace` (default "default"); the library's settings, in
seconds: `lease_duration` (default: the run's lease, rounded up to whole seconds; never shorter,
or the history would claim a longer hold than the Lease gives), `renew_deadline` (default 2/3
of it, and above the library's floor of 1.2 retry periods), `retry_period` (default 1, the
library's minimum). The library refuses a lease_duration under 2 s (no renew_deadline fits).
The worker talks to `endpoints[worker % len(endpoints)]`.

Lost-lock notices (`--client-opt notices=stop|work`, workloads/notices.py): the library says a
holder lost the Lease with its `onstopped_leading`, at the end of its own renew loop; with notices
on, that loop runs for each grant and renew waits for it (workloads/clients/kube_keeper.py).
"""

from __future__ import annotations

import datetime
import logging
import math
import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fencecheck.workloads import options as opts
from fencecheck.workloads.base import DefiniteFailure, Grant, Indeterminate, WorkloadError
from fencecheck.workloads.clients.kube_keeper import Keeper, KeeperApi
from fencecheck.workloads.clients.polling import poll
from fencecheck.workloads.evidence import EVIDENCE
from fencecheck.workloads.notices import Sink

log = logging.getLogger(__name__)

# Refusals: the server surely did not apply the write (conflict, invalid, forbidden, not found,
# throttled). Anything else from a write (5xx: etcd timed out, the request may have committed)
# is an unknown outcome.
_REFUSED = frozenset({400, 401, 403, 404, 409, 422, 429})


class _LeaseApi:
    """The Lease calls the library's `LeaseLock` makes, on one `CoordinationV1Api`, each with the
    operation's timeout; records the Lease each write returned (`written`), the holder last read
    (`holder`), and why the outcome of the last write is unknown (`unsure`).

    A number is the kubernetes client's total timeout for the request (urllib3 `Timeout(total=)`,
    by the wall clock): the operation's bound. A (connect, read) pair bounds each socket wait
    instead; the library's own renew loop (kube_keeper.py) uses it, as the library sets no
    timeout at all: with a total, a request in flight when its process is paused fails on waking
    without reading the answer already waiting (urllib3 raises at a read timeout of 0), an
    error the library does not catch, which ends its loop with no notice."""

    def __init__(self, api: Any, timeout_s: float | tuple[float, float]) -> None:
        self._api = api
        self.timeout_s = timeout_s
        self.written: Any = None
        self.holder: str | None = None
        self.unsure: str | None = None
        self.invalid: str | None = None

    def reset(self) -> None:
        self.written, self.holder, self.unsure, self.invalid = None, None, None, None

    def read_namespaced_lease(self, name: str, namespace: str) -> Any:
        lease = self._api.read_namespaced_lease(name, namespace, _request_timeout=self.timeout_s)
        self.holder = lease.spec.holder_identity if lease.spec else None
        return lease

    def create_namespaced_lease(self, namespace: str, body: Any) -> Any:
        return self._write(lambda: self._api.create_namespaced_lease(
            namespace, body, _request_timeout=self.timeout_s))

    def replace_namespaced_lease(self, name: str, namespace: str, body: Any) -> Any:
        return self._write(lambda: self._api.replace_namespaced_lease(
            name=name, namespace=namespace, body=body, _request_timeout=self.timeout_s))

    def _write(self, call: Callable[[], Any]) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

        try:
            self.written = call()
        except ApiException as e:
            if e.status not in _REFUSED:
                self.unsure = f"{e.status} {e.reason}"
            elif e.status in (400, 422):  # asking again cannot help (a bad Lease name)
                self.invalid = f"{e.status} {e.reason}: {e.body}"
            raise
        except (NewConnectionError, ConnectTimeoutError):
            raise  # never connected: nothing was sent
        except Exception as e:
            self.unsure = f"{type(e).__name__}: {e}"
            raise
        return self.written


@dataclass(slots=True)
class _Term:
    """A grant's handle: the candidate that won (its election state and identity); what the
    library had observed of the Lease: its record's holder and when it saw it change, by the
    library's clock (time.time(), ms) and by CLOCK_MONOTONIC (ns), the evidence of how it
    judged the Lease expired; and with notices on, the library's own renew loop kept for it
    (workloads/clients/kube_keeper.py)."""

    election: Any
    lock: Any
    identity: str
    keeper: Keeper | None = None
    observed: tuple[str | None, int, int] | None = None  # (holder, wall ms, monotonic ns)
    # at the start of the last step: time.time(), monotonic ns, and `observed` then
    last_step: tuple[float, int, tuple[str | None, int, int] | None] = (0.0, 0, None)


class KubernetesPythonClient:
    """LockClient over `kubernetes.leaderelection`'s LeaseLock. See the module docstring."""

    name = "kubernetes-python"

    def __init__(self, options: Mapping[str, Any]) -> None:
        from kubernetes import client

        eps = opts.endpoints(options)
        host, port = eps[int(options.get("worker", 0)) % len(eps)]
        for key in ("k8s_token", "k8s_ca_file"):
            if not options.get(key):
                raise WorkloadError(f"kubernetes-python needs the client option {key} "
                                    "(the kubernetes backend gives it)")
        conf = client.Configuration()
        conf.host = f"https://{host}:{port}"
        conf.ssl_ca_cert = str(options["k8s_ca_file"])
        conf.api_key = {"authorization": str(options["k8s_token"])}
        conf.api_key_prefix = {"authorization": "Bearer"}
        conf.retries = False  # no hidden retries: a retry is a new operation in the history
        self.namespace = str(options.get("k8s_namespace", "default"))
        self.timeout_s = opts.op_timeout_s(options)
        self.api = _LeaseApi(client.CoordinationV1Api(client.ApiClient(conf)), self.timeout_s)
        self.options = dict(options)
        self.retry_period_s = _seconds(options, "retry_period") or 1.0
        self.prefix = f"fc-{options.get('worker', 0)}-{os.getpid()}"
        self.sink: Sink | None = None  # lost-lock notices (workloads/notices.py)
        self.keepers: list[Keeper] = []

    # -- LockClient

    def acquire(self, lock: str, lease_ms: int, timeout_s: float) -> Grant:
        # a grant the worker dropped (an unknown outcome retired its process) renews no more
        for keeper in self.keepers:
            keeper.stop(self.timeout_s)
        self.keepers.clear()
        term = self._candidate(lock, lease_ms)

        def attempt() -> Any:
            return self._step(term, "acquire")

        written, sent = poll(lock, timeout_s, attempt, self.retry_period_s)
        token = _token(written)
        if self.sink is not None:
            term = self._keep(term, lock, token, lease_ms, self.sink)
        return Grant(lock, token, lease_ms, term, attempt_ns=sent,
                     evidence={EVIDENCE: _took_over(term)})

    def on_notice(self, sink: Sink) -> None:
        self.sink = sink

    def _keep(self, term: _Term, lock: str, token: int, lease_ms: int, sink: Sink) -> _Term:
        """The grant's term with the library's renew loop running for it (kube_keeper.py)."""
        from kubernetes.leaderelection import leaderelection
        from kubernetes.leaderelection.resourcelock import leaselock

        lib: Any = (leaderelection.LeaderElection, leaselock.LeaseLock)  # the library is untyped
        api = KeeperApi(_LeaseApi(self.api._api, (self.timeout_s, self.timeout_s)))
        lease_lock = lib[1](lock, self.namespace, term.identity)
        lease_lock.api_instance = api
        election = lib[0](_config(lease_lock, self.options, lease_ms))
        keeper = Keeper(election, api, lambda: sink(lock, token, "onstopped_leading"))
        self.keepers.append(keeper)
        return _Term(term.election, term.lock, term.identity, keeper, term.observed,
                     term.last_step)

    def renew(self, grant: Grant, lease_ms: int) -> Grant:
        term: _Term = grant.handle
        if term.keeper is not None:  # the library renews: wait for its next renewal
            since = time.monotonic_ns()
            got = term.keeper.renewed_since(since, term.keeper.patience_s(self.timeout_s))
            if got == "unknown":
                raise Indeterminate("timeout", f"{grant.lock}: no renewal by the library's loop")
            if got == "stopped":
                raise DefiniteFailure("not-leader", f"{grant.lock}: the library stopped leading")
            return Grant(grant.lock, grant.token, lease_ms, term)
        if self._step(term, "renew") is None:
            raise DefiniteFailure("not-leader", f"{grant.lock}: the Lease has another holder")
        return Grant(grant.lock, grant.token, lease_ms, term)

    def release(self, grant: Grant) -> None:
        from kubernetes.leaderelection.leaderelectionrecord import LeaderElectionRecord

        record: Any = LeaderElectionRecord  # the library is untyped
        term: _Term = grant.handle
        if term.keeper is not None:
            term.keeper.stop(self.timeout_s)
        self.api.reset()
        found, _ = self._call(lambda: term.lock.get(grant.lock, self.namespace), "release")
        if not found or self.api.holder != term.identity:
            raise DefiniteFailure("not-owner", f"{grant.lock}: held by {self.api.holder!r}")
        now = str(datetime.datetime.now())  # the library's record format
        empty = record("", "1", now, now)
        if not self._call(lambda: term.lock.update(grant.lock, self.namespace, empty),
                          "release"):
            raise DefiniteFailure("conflict", f"{grant.lock}: the Lease changed under us")

    def close(self) -> None:
        for keeper in self.keepers:
            keeper.stop(self.timeout_s)
        self.api._api.api_client.close()

    # -- the library's step, classified

    def _candidate(self, lock: str, lease_ms: int) -> _Term:
        from kubernetes.leaderelection import leaderelection
        from kubernetes.leaderelection.resourcelock import leaselock

        lib: Any = (leaderelection.LeaderElection, leaselock.LeaseLock)
        election_cls, lock_cls = lib  # the library is untyped

        identity = f"{self.prefix}-{uuid.uuid4().hex[:8]}"
        lease_lock = lock_cls(lock, self.namespace, identity)
        lease_lock.api_instance = self.api
        config = _config(lease_lock, self.options, lease_ms)
        return _Term(election_cls(config), lease_lock, identity)

    def _step(self, term: _Term, what: str) -> Any:
        """One `try_acquire_or_renew`: the Lease written if it leads now, None if not."""
        self.api.reset()
        seen = term.election.observed_time_milliseconds
        term.last_step = (time.time(), time.monotonic_ns(), term.observed)
        won = self._call(term.election.try_acquire_or_renew, what)
        record = term.election.observed_record
        if term.election.observed_time_milliseconds != seen and record is not None:
            # the library saw the record change in this call: when, by both clocks
            term.observed = (record.holder_identity, term.election.observed_time_milliseconds,
                             term.last_step[1])
        return self.api.written if won else None

    def _call(self, call: Callable[[], Any], what: str) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            result = call()
        except (ApiException, HTTPError, OSError) as e:
            if self.api.unsure is not None:
                raise Indeterminate("unknown", f"{what}: {self.api.unsure}") from None
            # Nothing was written (a read failed, or a write never reached the server).
            raise DefiniteFailure("unavailable", f"{what}: {type(e).__name__}: {e}") from None
        if self.api.unsure is not None:  # the library swallowed a write's unknown outcome
            raise Indeterminate("unknown", f"{what}: {self.api.unsure}")
        if self.api.invalid is not None:
            raise DefiniteFailure("invalid", f"{what}: {self.api.invalid}")
        return result


def _took_over(term: _Term) -> dict[str, Any]:
    """An acquire's evidence: the candidate, the library's time source, and the record it took
    the Lease over from (its holder, and how long the library had seen it unchanged by its own
    clock and by the monotonic one) when it took it from another holder."""
    out: dict[str, Any] = {"identity": term.identity, "time_source": "time.time()"}
    wall, mono, prior = term.last_step
    if prior is not None and prior[0] and prior[0] != term.identity:
        holder, seen_ms, seen_ns = prior
        out["took_over"] = {
            "holder": holder, "lease_duration_s": term.election.election_config.lease_duration,
            "wall_elapsed_ms": int(wall * 1000) - seen_ms,
            "monotonic_elapsed_ms": (mono - seen_ns) // 1_000_000}
    return out


def check_settings(options: Mapping[str, Any], lease_ms: int) -> None:
    """WorkloadError if the library would refuse these settings for a run's lease (called
    before a run starts, so that a refusal is exit 3 rather than every acquire failing)."""
    _config(object(), options, lease_ms)


def _config(lease_lock: Any, options: Mapping[str, Any], lease_ms: int) -> Any:
    """The library's election `Config` for these options and the run's lease: lease_duration
    (whole seconds, default the lease rounded up, never shorter than it), renew_deadline,
    retry_period; validated by the library itself."""
    from kubernetes.leaderelection import electionconfig

    config_cls: Any = electionconfig.Config  # the library is untyped
    least = math.ceil(lease_ms / 1000)
    given = _seconds(options, "lease_duration")
    duration = least if given is None else int(given)
    if given is not None and given != duration:
        raise WorkloadError("kubernetes-python: lease_duration must be whole seconds (the "
                            "Lease's leaseDurationSeconds)")
    if duration < least:
        raise WorkloadError(f"kubernetes-python: lease_duration {duration} s is shorter than the "
                            f"run's lease ({lease_ms} ms): the history would claim a longer "
                            "hold than the Lease gives")
    retry = _seconds(options, "retry_period") or 1.0
    # client-go's proportions (15/10/2 s), kept above the library's floor of 1.2 retries
    deadline = _seconds(options, "renew_deadline") or max(duration * 2 / 3,
                                                          (duration + 1.2 * retry) / 2)
    try:
        return config_cls(lease_lock, duration, deadline, retry,
                          onstarted_leading=lambda: None, onstopped_leading=None)
    except SystemExit as e:  # the library's way of refusing its settings
        raise WorkloadError(f"kubernetes-python: {e} (lease_duration {duration} s, "
                            f"renew_deadline {deadline:g} s, retry_period {retry:g} s; run's "
                            f"lease {lease_ms} ms)") from None


def _seconds(options: Mapping[str, Any], key: str) -> float | None:
    raw = options.get(key)
    if raw is None:
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise WorkloadError(f"kubernetes-python: {key} must be seconds, not {raw!r}") from None
    if value < 1:
        raise WorkloadError(f"kubernetes-python: {key} must be >= 1 s")
    return value


def _token(lease: Any) -> int:
    rv = lease.metadata.resource_version if lease is not None and lease.metadata else None
    try:
        return int(str(rv))
    except (TypeError, ValueError):
        raise Indeterminate("no-token", f"the Lease write returned resourceVersion {rv!r}") \
            from None
