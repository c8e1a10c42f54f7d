"""The package's own facts: `--version` agrees with the installed metadata, the LICENSE file is
the license pyproject declares."""

from __future__ import annotations

import tomllib
from importlib.metadata import version

from tests.conftest import REPO, run_fencecheck


def test_version_flag_prints_the_installed_version() -> None:
    r = run_fencecheck("--version", timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == f"fencecheck {version('fencecheck')}"


def test_license_file_matches_pyproject() -> None:
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert meta["license"]["text"] == "Apache-2.0"
    assert "Apache License" in (REPO / "LICENSE").read_text()[:200]
    assert "Version 2.0" in (REPO / "LICENSE").read_text()[:200]
