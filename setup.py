"""The one part of the build pyproject.toml cannot declare: the checker's optional C loops.

checker/_pairing.c and checker/_rwpass.c are the checker's two hot loops in C (checker/native.py,
docs/checker-speed.md). Both are optional: where they do not compile (no C compiler or no
Python headers) the install goes on and the checker runs its Python loops, which give the same
results. Each build carries the digest of its sources, so that an edited .c is never silently
stood in for by an older build (checker/native.py uses a build only while they match).
"""

import hashlib
from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).parent / "checker"


def extension(name: str) -> Extension:
    h = hashlib.sha256()
    for source in (f"{name}.c", "_loops.h"):  # as checker/native.py's source_digest
        h.update((HERE / source).read_bytes())
    return Extension(f"fencecheck.checker.{name}", [f"checker/{name}.c"], optional=True,
                     depends=["checker/_loops.h"],
                     define_macros=[("SOURCE_DIGEST", f'"{h.hexdigest()[:16]}"')],
                     extra_compile_args=["-O2", "-Wall"])


setup(ext_modules=[extension("_pairing"), extension("_rwpass")])
