"""The kubernetes-python client's lost-lock notices: the library's own renewal loop, kept for each
grant while notices are on (the client option `notices`, workloads/notices.py).

`kubernetes.leaderelection` tells its holder that leadership is lost through the election config's
`onstopped_leading`, which `LeaderElection.run` calls when its `renew_loop` returns: when no renewal
succeeded for `renew_deadline` (by the wall clock). The client drives the library one step per
operation (workloads/clients/kube_lease.py), which leaves no loop to give that notice; with notices
on, a `Keeper` runs for the grant, in a thread of its own, what the library's `run()` does once it
leads: `renew_loop()`, then `onstopped_leading`, the notice. Its `LeaderElection` is of the grant's
identity over a `LeaseLock` of its own (so that its requests and the worker's operations never share
state); its first step renews the Lease the acquire took. Only one renews, then: the worker's renew
waits for the keeper's next successful renewal sent after the renew began, as client-go's does for
its elector. Release stops the keeper first: its Lease API raises `Stopped` at its next call, which
ends the library's loop without a notice. An error the library does not catch (its `get` catches
only API errors) ends the loop without `onstopped_leading`: the library gave no notice, and the
worker's next renew is refused, or unknown if the library's last request may have renewed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class Stopped(Exception):
    """The keeper was stopped: raised into the library's loop to end it."""


class KeeperApi:
    """The Lease calls of one keeper's LeaseLock (wrapping the client's `_LeaseApi` type): each
    write that succeeded, by its send time (`time.monotonic_ns()`), and `Stopped` once stopped."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self.cond = threading.Condition()
        self.renewed: list[int] = []
        self.unsure: list[int] = []  # writes whose outcome is unknown (api.unsure), by send time
        self.stopped = False
        self.done = False  # the library's loop has ended

    def _check(self) -> None:
        if self.stopped:
            raise Stopped

    def read_namespaced_lease(self, name: str, namespace: str) -> Any:
        self._check()
        return self.api.read_namespaced_lease(name, namespace)

    def create_namespaced_lease(self, namespace: str, body: Any, **_: Any) -> Any:
        return self._write(lambda: self.api.create_namespaced_lease(namespace, body))

    def replace_namespaced_lease(self, name: str, namespace: str, body: Any, **_: Any) -> Any:
        return self._write(lambda: self.api.replace_namespaced_lease(name, namespace, body))

    def _write(self, call: Callable[[], Any]) -> Any:
        self._check()
        sent = time.monotonic_ns()
        self.api.unsure = None
        try:
            out = call()
        except BaseException:
            if self.api.unsure is not None:  # a timeout, a 5xx: it may have renewed
                with self.cond:
                    self.unsure.append(sent)
            raise
        with self.cond:
            self.renewed.append(sent)
            self.cond.notify_all()
        return out


class Keeper:
    """The library's renew loop for one grant, in a daemon thread, and its `onstopped_leading`
    (the notice) when the loop gives up."""

    def __init__(self, election: Any, api: KeeperApi, notice: Callable[[], None]) -> None:
        self.election = election
        self.api = api
        self._notice = notice
        self.failed = False
        election.election_config.onstopped_leading = self.stopped_leading
        self.thread = threading.Thread(target=self._run, name="kube-keeper", daemon=True)
        self.thread.start()

    def stopped_leading(self) -> None:
        if not self.api.stopped:
            self._notice()

    def _run(self) -> None:
        try:
            # LeaderElection.run() once it leads: its renew loop, then onstopped_leading. Not
            # run() itself: a candidate whose first renewal fails campaigns again, and would
            # take the Lease anew for a grant the worker may already have given up.
            self.election.renew_loop()
            self.stopped_leading()
        except Stopped:
            pass
        except Exception as e:  # the library let it through: its loop is over, no notice
            log.warning("kubernetes-python: the library's renew loop ended: %r", e)
            self.failed = True  # what its last request did is not known
        finally:
            with self.api.cond:
                self.api.done = True
                self.api.cond.notify_all()

    def patience_s(self, request_s: float) -> float:
        """How long a renew waits: the library's loop retries for renew_deadline before it
        gives up (its answer then is the notice), plus a retry period and a request."""
        config = self.election.election_config
        return float(config.renew_deadline) + float(config.retry_period) + request_s

    def renewed_since(self, since_ns: int, timeout_s: float) -> str:
        """"renewed" once a renewal sent at or after `since_ns` succeeded; "stopped" if the
        library's loop ended first, with no write of an unknown outcome since; else "unknown"
        (at the timeout). A wait that wakes far later than it asked (the process was paused)
        starts its patience again: the library's loop, paused too, needs time to answer."""
        deadline = time.monotonic() + timeout_s
        with self.api.cond:
            while True:
                if self.api.renewed and self.api.renewed[-1] >= since_ns:
                    return "renewed"
                if self.api.done:
                    unsure = any(t >= since_ns for t in self.api.unsure)
                    return "unknown" if unsure or self.failed else "stopped"
                before = time.monotonic()
                left = deadline - before
                if left <= 0:
                    return "unknown"
                step = min(left, 0.1)
                self.api.cond.wait(step)
                if time.monotonic() - before > step + 0.5:  # stopped meanwhile: a pause
                    deadline = time.monotonic() + timeout_s

    def stop(self, timeout_s: float) -> None:
        """End the loop (no notice) and wait for it, at most timeout_s."""
        self.api.stopped = True
        self.thread.join(timeout_s)
