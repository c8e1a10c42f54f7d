"""The run store (`--store`, default `store/`): a run directory `<store>/<test>/<YYYYmmddTHHMMSS>/`
per run, a `latest` link per test, and the files every run leaves (test.json, history.jsonl,
results.json, report.html, nodes/, logs).

Three things were called "store"; they now have three names: the *run store* (this module, the
directory tree of runs), a *run directory* (one run's directory in it, what services and runtimes
get as `run_dir`), and the *fenced store* (the resource server of workloads/resources/store.py,
selected
with `--resource store`)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import subprocess
import time
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class StoreError(Exception):
    """The store cannot hold a run (a path that is a file, no permission)."""


def new_run_dir(store: Path, test: str) -> Path:
    store = store.absolute()  # remote nodes (ssh, docker mounts) see the same absolute path
    if store.exists() and not store.is_dir():
        raise StoreError(f"store: {store} exists and is not a directory")
    base = store / test
    stamp = time.strftime("%Y%m%dT%H%M%S")
    try:
        base.mkdir(parents=True, exist_ok=True)
        run_dir = base / stamp
        n = 1
        while True:
            try:
                run_dir.mkdir()
                break
            except FileExistsError:
                n += 1
                run_dir = base / f"{stamp}-{n}"
    except (NotADirectoryError, PermissionError, FileExistsError) as e:
        raise StoreError(f"store: cannot create a run directory under {base}: {e}") from None
    latest = base / "latest"
    tmp = base / f".latest-{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    tmp.symlink_to(run_dir.name)
    tmp.replace(latest)
    (run_dir / "nodes").mkdir()
    return run_dir


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    tmp.replace(path)


def _first_line(argv: list[str]) -> str | None:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else None


def versions(backend: str, client: str | None = None,
             client_options: Mapping[str, Any] | None = None) -> dict[str, str | None]:
    """What ran, for test.json: fencecheck, Python, the kernel, the backend's server, the Python
    lock libraries, and under "client" the lock client in the comparison's words with the
    version it ran (its Python distribution's, or what its shipped program pins, or the
    release its `version` option built it against)."""
    out: dict[str, str | None] = {
        "fencecheck": version("fencecheck"),
        "python": platform.python_version(),
        "kernel": platform.release(),
    }
    from fencecheck.descriptors import catalog

    b = catalog.backends().get(backend)
    if b is not None and b.version_argv:
        out[backend] = _first_line(list(b.version_argv))
    libs = dict.fromkeys(lib for d in catalog.backends().values() for lib in d.python_libs)
    for lib in (*libs, "psycopg"):
        with contextlib.suppress(Exception):
            out[f"py:{lib}"] = version(lib)
    desc = next((c for c in b.clients if c.name == client), None) if b is not None else None
    if desc is not None and desc.library:
        built = (client_options or {}).get("version")
        out["client"] = desc.library + _client_version(desc.name, desc.dist, built)
    return out


def _client_version(name: str, dist: str | None, built: Any = None) -> str:
    """" [dist version]" for a client on a Python distribution, " [label version]" for a
    shipped program that pins one (or is built against `built`), else ""."""
    if dist is not None:
        try:
            return f" [{dist} {version(dist)}]"
        except PackageNotFoundError:
            return f" [{dist}]"
    from fencecheck.workloads.clients.build import pinned

    pin = pinned(name)
    if pin and isinstance(built, str):
        pin = f"{pin.rsplit(' ', 1)[0]} {built}"
    return f" [{pin}]" if pin else ""
