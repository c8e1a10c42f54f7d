"""The fault mechanisms on the cluster side: pause/kill (nemesis), iptables partitions, the
clock shim, Sentinel failover. The run-level fault plugins
wrapping them are in fencecheck/faults."""
