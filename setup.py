"""The one part of the build pyproject.toml cannot declare: the checker's optional C loops.

checker/_pairing.c and checker/_rwpass.c are the checker's two hot loops in C (checker/native.py,
docs/checker-speed.md). Both are optional: where they do not compile (no C compiler or no
Python headers) the install goes on and the checker runs its Python loops, which give the same
results. Each build carries the digest of its sources, so that an edited .c is never silently
stood in for by an older build (checker/native.py uses a build only while they match).
"""

import importlib.util
from pathlib import Path

from setuptools import Extension, setup

# checker/native.py computes the digest it checks a build against (standard library only, so
# loaded here by its path, without the package it belongs to)
# (fencecheck/checker links to checker/ in a checkout; an sdist holds the package itself)
_spec = importlib.util.spec_from_file_location(
    "native", Path(__file__).parent / "fencecheck" / "checker" / "native.py")
assert _spec is not None and _spec.loader is not None
native = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(native)


def extension(name: str) -> Extension:
    return Extension(f"fencecheck.checker.{name}", [f"checker/{name}.c"], optional=True,
                     depends=["checker/_loops.h"],
                     define_macros=[("SOURCE_DIGEST", f'"{native.source_digest(name)}"')],
                     extra_compile_args=["-O2", "-Wall"])


setup(ext_modules=[extension("_pairing"), extension("_rwpass")])
