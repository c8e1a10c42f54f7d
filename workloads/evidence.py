"""Evidence of what a lock library did, as the history records it: the `evidence` object of an
operation's value (docs/history-format.md, "Evidence").

A client that can see its library's steps (the Lease writes client-go's elector made, the rows
a ShedLock unlock touched, the state of a renewal thread) returns them with the operation, in
any outcome: `Grant.evidence` on an ok acquire or renew, the mapping `release` returns, or the
`evidence` of a `DefiniteFailure`/`Indeterminate`. The worker puts it under the completion
value's "evidence" key. Nothing here judges anything: the checker's explanations read it
(fencecheck.checker.steps) and never a violation's existence.

Times: an entry of a list in the evidence may carry when it happened as `mono_ns`
(CLOCK_MONOTONIC, which the worker and its client programs share; `time.monotonic_ns()`) or, from
a stdio program, as `at_ns` (ns after the program read the request, possibly negative: the
protocol's convention for `attempt_ns`). The worker's event log turns both into `time`, ns on
the history's clock, so an entry can be set beside the operations.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

EVIDENCE = "evidence"  # the key of the op value it is recorded under


def anchor(evidence: Mapping[str, Any], sent_mono_ns: int) -> dict[str, Any]:
    """A stdio program's evidence with every entry's `at_ns` (ns after the request was read)
    made `mono_ns`, from when the request was sent (the pipe's delay is below what the
    explanations resolve)."""
    return _map_entries(evidence, "at_ns", "mono_ns", lambda at: sent_mono_ns + at)


def stamp(evidence: Mapping[str, Any], t0_ns: int) -> dict[str, Any]:
    """Evidence with every entry's `mono_ns` made `time` (ns since the run's t0)."""
    return _map_entries(evidence, "mono_ns", "time", lambda mono: max(0, mono - t0_ns))


def with_evidence(value: dict[str, Any], evidence: Mapping[str, Any] | None) -> dict[str, Any]:
    """A refused or unknown op's value with the library's evidence."""
    return value if not evidence else {**value, EVIDENCE: evidence}


def stamped(value: dict[str, Any], t0_ns: int) -> dict[str, Any]:
    """A value with its evidence's times stamped (the event log does it as it writes)."""
    ev = value.get(EVIDENCE)
    return value if not isinstance(ev, Mapping) else {**value, EVIDENCE: stamp(ev, t0_ns)}


def _map_entries(evidence: Mapping[str, Any], old: str, new: str,
                 convert: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in evidence.items():
        if isinstance(value, list):
            value = [_entry(e, old, new, convert) for e in value]
        elif isinstance(value, dict):
            value = _entry(value, old, new, convert)
        out[key] = value
    return out


def _entry(e: Any, old: str, new: str, convert: Any) -> Any:
    if not isinstance(e, dict) or old not in e:
        return e
    at = e[old]
    if not isinstance(at, int) or isinstance(at, bool):
        return e
    return {**{k: v for k, v in e.items() if k != old}, new: convert(at)}
