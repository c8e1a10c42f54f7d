"""One run end to end: its configuration (`config`), the plan decided from it (`plan`), the
wiring to concrete parts (`wiring`, `resources`), the controller that carries it out
(`controller`), the worker processes (`workers`), signals, the run store (`store`), the live tail
of the event logs (`tail`) and the progress line drawn from it (`progress`), the merge of those
logs into the history (`history_merge`) and the re-check of a run directory (`recheck`).

`run` and `nemesis` are one floor: the controller carries out the nemesis schedule, and the
schedule acts on the run's workers; everything above them (`cli`, `fleet`, `api`) may import both,
and neither imports anything above."""
