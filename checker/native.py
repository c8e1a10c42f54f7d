"""The checker's loops compiled from C, where they are built and current.

Two hot loops have a second implementation in C: fastload's pairing loop (checker/_pairing.c)
and the grant table's pass over reads and writes (checker/_rwpass.c, checker.rwpass). setup.py
builds each as an optional extension where a C compiler and Python's headers are at hand; where
one is not built, its Python loop, the reference, reads the same (tests/unit/checker/
test_loops.py holds each pair equal). Each build carries the digest of the sources it was made
from (its .c and the shared _loops.h): one made from another version of them (an edited
checkout not yet rebuilt) is not used. `scripts/setup.sh` builds them again when they changed.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
from pathlib import Path
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent


def source_digest(name: str) -> str:
    """The digest setup.py compiles into module `name`: of its .c, then the shared header."""
    h = hashlib.sha256()
    for source in (f"{name}.c", "_loops.h"):
        h.update((HERE / source).read_bytes())
    return h.hexdigest()[:16]


def compiled(name: str, *config: Any) -> ModuleType | None:
    """fencecheck.checker.<name> (`_pairing` or `_rwpass`) if it is built from the sources
    beside it (or no sources are beside it, as in an installed wheel), else None; given
    `config`, configured with it (`module.configure(*config)`), and None if it refuses them
    (a type whose fields are not object slots: msgspec's layout, or Line or Op, changed)."""
    try:
        module = importlib.import_module(f"fencecheck.checker.{name}")
    except ImportError:
        return None
    if (HERE / f"{name}.c").exists() and source_digest(name) != module.SOURCE_DIGEST:
        log.debug("checker: %s was built from other sources; its Python loop reads instead",
                  module.__file__)
        return None
    if config:
        try:
            module.configure(*config)
        except (TypeError, AttributeError) as e:
            log.debug("checker: %s not used: %s", module.__file__, e)
            return None
    return module
