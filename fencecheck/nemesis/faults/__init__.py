"""Faults as plugins: one module per fault (pause, partition, kill, clock, failover), each a
FaultDescriptor (declared capabilities) and a Fault (start/stop/heal) built from it. The
controller and the schedule only go through `base.Fault`; `registry.py` lists built-in faults and
those installed plugins register under the entry-point group `fencecheck.faults`."""
