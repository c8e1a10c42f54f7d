"""The lock services (and the PostgreSQL resource server) a runtime's nodes run: one module each,
built from a backend descriptor (descriptors/, installed as fencecheck.descriptors)."""
