"""The faults of a run and their schedule: the seeded schedule (`schedule`), when a holder's pause
may end (`successor`), the fault modules (`faults`), and the tools that reuse a recorded
schedule: `replay` and `shrink`."""
