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

The pause ends SETTLE_S after that write was seen, not at once, for the replay's sake: a replay
plays the recorded hold as a fixed time, and its pause starts a little earlier or later after the
grant than the recorded one did (the controller's poll, under load), so a hold that ended right
at the successor's write ends before the successor in some replays. Measured
(`bench_replay.py --tries 10`, redis, lease 1 s, seed 1; all 10 replays found violations either
way): ending at once, 5 of 10 replays found their first violation within 0.7 s of the recorded
run's (median 2.8 s, recorded 1.9 s); ending 0.2 s later, 9 of 10 (median 2.0 s, recorded 1.9 s),
and in a second recording all 10 within 0.3 s (median 1.9 s, recorded 1.8 s).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from fencecheck.run.tail import Holding

ENDED_BY_SUCCESSOR = "successor-wrote"  # the reason a stop's completion value gives
SETTLE_S = 0.2  # from seeing the successor's write to the end of the pause


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
