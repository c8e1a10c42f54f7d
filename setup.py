"""The one part of the build pyproject.toml cannot declare: the checker's optional C loop.

checker/_fastpair.c is fastload.py's pairing loop in C (docs/checker-speed.md). It is optional:
where it does not compile (no C compiler or no Python headers) the install goes on and the
checker reads histories with the Python loop, which gives the same ops. The source's digest is
compiled in, so that an edited .c is never silently stood in for by an older build (fastload
uses a build only while its digest matches the source beside it).
"""

import hashlib
from pathlib import Path

from setuptools import Extension, setup

SOURCE = "checker/_fastpair.c"
DIGEST = hashlib.sha256((Path(__file__).parent / SOURCE).read_bytes()).hexdigest()[:16]

setup(ext_modules=[Extension("fencecheck.checker._fastpair", [SOURCE], optional=True,
                             define_macros=[("SOURCE_DIGEST", f'"{DIGEST}"')],
                             extra_compile_args=["-O2", "-Wall"])])
