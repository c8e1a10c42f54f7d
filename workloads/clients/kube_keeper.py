"""The kubernetes-python client's lost-lock notices: the library's own renewal loop, kept for each
grant while notices are on (the client option `notices`, workloads/notices.py).

`kubernetes.leaderelection` tells its holder that leadership is lost through the election
config's `onstopped_leading`, which `LeaderElection.run` calls when its `renew_loop` returns: when
no renewal succeeded for `renew_deadline` (by the wall clock). The client drives the library one
step per operation (workloads/clients/kube_lease.py), which leaves no loop to give that notice;
with notices on, a `Keeper` runs the library's `run()` for the grant in a thread of its own: a
`LeaderElection` of the grant's identity over a `LeaseLock` of its own (so that its requests and
the worker's operations never share state), whose first step renews the Lease the acquire took,
and whose `onstopped_leading` is the notice. Only one renews, then: the worker's renew waits for
the keeper's next successful renewal sent after the renew began, as client-go's does for its
elector. Release stops the keeper first: its Lease API raises `Stopped` at its next call, which
ends the library's loop without a notice. An error the library does not catch (its `get` catches
only API errors) ends the loop without `onstopped_leading`: the library gave no notice, and the
worker's next renew is refused.
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
        out = call()
        with self.cond:
            self.renewed.append(sent)
            self.cond.notify_all()
        return out


class Keeper:
    """The library's `run()` for one grant, in a daemon thread; `notice()` is its
    `onstopped_leading`."""

    def __init__(self, election: Any, api: KeeperApi, notice: Callable[[], None]) -> None:
        self.election = election
        self.api = api
        self._notice = notice
        election.election_config.onstopped_leading = self.stopped_leading
        self.thread = threading.Thread(target=self._run, name="kube-keeper", daemon=True)
        self.thread.start()

    def stopped_leading(self) -> None:
        if not self.api.stopped:
            self._notice()

    def _run(self) -> None:
        try:
            self.election.run()
        except Stopped:
            pass
        except Exception as e:  # the library let it through: its loop is over, no notice
            log.warning("kubernetes-python: the library's renew loop ended: %r", e)
        finally:
            with self.api.cond:
                self.api.done = True
                self.api.cond.notify_all()

    def renewed_since(self, since_ns: int, timeout_s: float) -> bool | None:
        """True once a renewal sent at or after `since_ns` succeeded; False if the library's
        loop ended first; None at the timeout."""
        deadline = time.monotonic() + timeout_s
        with self.api.cond:
            while True:
                if self.api.renewed and self.api.renewed[-1] >= since_ns:
                    return True
                if self.api.done:
                    return False
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.api.cond.wait(left)

    def stop(self, timeout_s: float) -> None:
        """End the loop (no notice) and wait for it, at most timeout_s."""
        self.api.stopped = True
        self.thread.join(timeout_s)
