"""The package alone: a wheel built from this checkout, installed into a fresh venv, runs a user's
test file with `lock_history` from a folder outside the checkout.

The fresh venv gets fencecheck only from the wheel. Its dependencies (and pytest) come from this
test environment's site-packages through a .pth file naming a folder of links to every entry
there except fencecheck's own (its editable install and metadata): installing them again would
need the network and minutes, and they are not what is under test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.api.test_plugin import check_user_run

REPO = Path(__file__).resolve().parents[2]
# What a wheel is built from: the project metadata and the packages (fencecheck/ links to the
# top-level folders; copied as links, built from a copy so no stale build/ of the checkout leaks
# into the wheel).
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "fencecheck",
           *sorted(p.name for p in (REPO / "fencecheck").iterdir() if p.is_symlink()))


def _build_wheel(tmp_path: Path) -> Path:
    src, dist = tmp_path / "src", tmp_path / "dist"
    src.mkdir()
    for name in SOURCES:
        path = REPO / name
        if path.is_dir() and not path.is_symlink():
            shutil.copytree(path, src / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy(path, src / name, follow_symlinks=False)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist),
                    str(src)], check=True, capture_output=True, timeout=600)
    [wheel] = dist.glob("fencecheck-*.whl")
    return wheel


def _deps_without_fencecheck(tmp_path: Path) -> Path:
    site = Path(sysconfig.get_paths()["purelib"])
    deps = tmp_path / "deps"
    deps.mkdir()
    for entry in site.iterdir():
        name = entry.name.lower()
        if name.startswith(("fencecheck", "__editable__")) or name.endswith(".pth"):
            continue
        (deps / entry.name).symlink_to(entry)
    return deps


@pytest.fixture
def clean_venv(tmp_path: Path) -> str:
    """A fresh venv with only the fencecheck wheel installed; returns its python."""
    wheel = _build_wheel(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = str(venv / "bin" / "python")
    subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q",
                    "--no-deps", "--no-index", str(wheel)], check=True, capture_output=True,
                   timeout=300)
    purelib = subprocess.run([python, "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    deps = _deps_without_fencecheck(tmp_path)
    (Path(purelib) / "test-deps.pth").write_text(f"{deps}\n")
    return python


def test_a_clean_venv_runs_a_users_lock_history_tests(clean_venv: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    where = subprocess.run([clean_venv, "-c", "import fencecheck.api, sys; "
                            "print(fencecheck.api.__file__); print(sys.path)"],
                           cwd=tmp_path, env=env, check=True, capture_output=True, text=True)
    module_file, path = where.stdout.splitlines()
    venv = Path(clean_venv).parent.parent
    assert Path(module_file).is_relative_to(venv), "fencecheck came from elsewhere"
    assert str(REPO) not in path, "the checkout is on the path"
    check_user_run(clean_venv, tmp_path)
