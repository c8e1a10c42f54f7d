"""The fault mechanisms on the cluster side: pause/kill (nemesis), iptables partitions
(partition, their shapes in grudges), the clock shim, Sentinel failover, the lose-unsynced FUSE
file system (unsynced_fs) and its control client (unsynced_ctl). The run-level fault plugins
wrapping them are in fencecheck/nemesis/faults."""
