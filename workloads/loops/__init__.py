"""The worker processes' loops: the lock and leader workloads' worker (`worker`) and the `cron`
workload's singleton job runner (`cron`)."""
