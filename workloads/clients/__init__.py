"""Shipped client programs of the stdio protocol (docs/client-protocol.md), one folder per
language (node/, java/, go/), the protocol's JSON Schemas (schema/), and their builds (build.py)."""
