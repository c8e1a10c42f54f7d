"""Backend, client and resource descriptors: one module per backend declares everything about it.

A descriptor is data (frozen dataclasses and "module:Class" strings), so this package imports
nothing else of the project: the worker process, config validation, doctor and the install lists
read it without loading any backend's library. `catalog.py` gathers the built-in descriptors and
those that installed plugins register through entry points. See docs/extending.md.
"""
