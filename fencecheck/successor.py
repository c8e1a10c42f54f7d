"""When a holder pause may end before its drawn hold: once its successor has been seen.

A pause of the lock holder exposes an unfenced lock when the holder wakes inside its
successor's critical section. A correct lock grants no successor before the paused holder's
lease has run out, and the successor shows up only a lease (and, for a Lease, an etcd lease or a
ZooKeeper session, a poll) after the holder was last seen, so a drawn hold long enough for the
slowest backend is seconds too long for the fastest. A fault whose descriptor declares
`ends_on_successor` therefore ends, in a run that draws its holds, as soon as the watch below
sees another worker granted the lock the paused holder held *and* an accepted write of that
successor: its write is then in the resource before the holder's next one, which is what every
kind a waking holder causes needs (stale-write-accepted: w1.ok < w2.invoke; interleaved-writes:
b between a1 and a2; lost-update: an increment overwritten). A fixed delay after the grant
would be a guess per client (a JVM or Go client over stdio writes later than redis-py). The
drawn hold stays the upper bound: no successor seen, no early end.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from fencecheck.tail import Holding

ENDED_BY_SUCCESSOR = "successor-wrote"  # the reason a stop's completion value gives


@dataclass(frozen=True, slots=True)
class SuccessorWatch:
    """The grant `held` of a paused holder, paused at `since` (controller's time.monotonic())."""

    held: Holding
    since: float

    def successor(self, grants: Iterable[Holding]) -> Holding | None:
        """The first grant in `grants` of another worker, of the same lock, granted after the
        paused one and seen after the pause began (a grant that is not both is a predecessor's),
        with an accepted write; None while there is none. Logs of workers on other hosts may
        carry skewed times: then no early end, never a wrong one."""
        for g in grants:
            if (g.worker != self.held.worker and g.lock == self.held.lock
                    and g.since_ns > self.held.since_ns and g.seen_at > self.since
                    and g.writes > 0):
                return g
        return None
