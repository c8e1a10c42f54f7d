"""The resources a lock protects: the fenced store (`store`), etcd values (`etcd`) and a
PostgreSQL table with a fence column (`postgres`)."""
