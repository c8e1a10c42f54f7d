"""Row settings that several clients' comparison scenarios share (descriptors/base.py:
`Scenario`; fencecheck/fleet/libraries.py writes the rows out)."""

from __future__ import annotations

from typing import Any

# partition rows: a critical section of 4 writes 700 ms apart outlasts the lease, so the holder
# cut off from the lock service goes on writing
LONG_SECTION: dict[str, Any] = {
    "time_limit_s": 20, "workload_options": {"think_ms": 700, "writes_per_section": 4}}
# kill rows of the Redis clients: a server killed and restarted empty inside a 5 s lease
RESTART_EMPTY: dict[str, Any] = {
    "lease_ms": 5000, "fault_duration_s": [0.3, 1.0], "time_limit_s": 15,
    "backend_options": {"persistence": "off"}, "workload_options": {"think_ms": 800}}
# clock rows of the Redis clients: a server's clock jumps past a 3 s lease
CLOCK_JUMP: dict[str, Any] = {"lease_ms": 3000, "time_limit_s": 15}
# kubernetes-python: the leader workload, a Lease of 3 s (the library refuses one under 2 s)
K8S_LEADER: dict[str, Any] = {"workload": "leader", "lease_ms": 3000, "concurrency": 3}
# the unfenced pause rows of the libraries that tell a holder its lock is gone: their notices
# recorded (the comparison's notice column) while the holder works on as before (notices=work:
# a write after the notice is the write-after-notice kind, beside what the row found already)
NOTICES_WORK: dict[str, Any] = {"notices": "work"}
