"""The build cache of the programs fencecheck builds for itself, and the runner both builders use.

A build is a folder `<cache>/<name>-<key>/` (the key says which sources it was built from);
`run` fills a temporary folder beside it, runs the recipe's commands there and renames it into
place only when every command succeeded, with a `.built` mark, so a half-built program is never
found. `$FENCECHECK_CLIENT_CACHE` moves the cache (default /var/cache/fencecheck/clients).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from fencecheck.toolchain.tools import build_env

log = logging.getLogger(__name__)

DEFAULT_CACHE = Path("/var/cache/fencecheck/clients")
MARK = ".built"


def cache_root() -> Path:
    return Path(os.environ.get("FENCECHECK_CLIENT_CACHE", DEFAULT_CACHE))


def is_built(folder: Path) -> bool:
    return (folder / MARK).exists()


def run(final: Path, name: str, fill: Callable[[Path], None],
        steps: Callable[[Path], list[list[str]]], error: Callable[[str], Exception]) -> bool:
    """Build `name` into `final` unless it is built there. `fill` puts the sources into the build
    folder, `steps` are the commands run in it; a failed command raises `error(message)` with the
    end of its output. Returns whether it built."""
    if is_built(final):
        return False
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=final.parent))
    try:
        fill(tmp)
        for argv in steps(tmp):
            log.info("%s: %s", name, " ".join(argv))
            res = subprocess.run(argv, cwd=tmp, stdin=subprocess.DEVNULL,
                                 capture_output=True, text=True, env=build_env())
            if res.returncode != 0:
                raise error(f"building {name}: {' '.join(argv)} exited {res.returncode}: "
                            f"{(res.stderr or res.stdout)[-2000:]}")
        # What a build makes does not depend on its folder's name (node_modules, class files,
        # a static binary), so it is built aside and renamed into place when complete.
        (tmp / MARK).write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ\n", time.gmtime()))
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return True


def summary(label: str, built: bool, started: float, path: Path) -> str:
    """The line a builder prints for one program: built or found, how long, where."""
    what = "built" if built else "cached"
    return f"fencecheck build: {label}: {what} in {time.monotonic() - started:.1f} s: {path}"


def build_main(prog: str, doc: str | None, label: str, build: Callable[[], tuple[Path, bool]],
               errors: tuple[type[Exception], ...], argv: Sequence[str] | None = None) -> int:
    """The command line of one pinned server build (`python -m ...`): `--version` prints
    `label` (name and pinned release); else build unless cached and print the summary. A
    failure of one of `errors` is one line and exit 3."""
    parser = argparse.ArgumentParser(prog=prog, description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="store_true",
                        help="print the pinned release and exit")
    if parser.parse_args(argv).version:
        print(label)
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    t = time.monotonic()
    caught: tuple[type[Exception], ...] = (*errors, OSError)
    try:
        path, built = build()
    except caught as e:
        print(f"fencecheck build: {e}", file=sys.stderr)
        return 3
    print(summary(label, built, t, path))
    return 0
