"""The package's own facts: `--version` and `version` agree with the installed metadata, the
license is declared as SPDX with its file, the README works on a package index page (every link
and image absolute, each pointing at a file of this repository) and has a pip install section,
and no shipped schema cites a file the package lacks."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version

import pytest

from fencecheck.checker.schemas import NAMES, schema
from tests.conftest import REPO, run_fencecheck

META = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
BASE = META["urls"]["Source"]  # https://github.com/<owner>/fencecheck


def test_version_flag_and_command_print_the_installed_version() -> None:
    want = f"fencecheck {version('fencecheck')}"
    for args in (("--version",), ("version",)):
        r = run_fencecheck(*args, timeout=60)
        assert r.returncode == 0 and r.stdout.strip() == want, args


def test_license_is_spdx_with_its_file() -> None:
    assert META["license"] == "Apache-2.0" and META["license-files"] == ["LICENSE"]
    head = (REPO / "LICENSE").read_text()[:200]
    assert "Apache License" in head and "Version 2.0" in head
    assert {"Homepage", "Source", "Documentation", "Changelog"} <= set(META["urls"])
    assert META["authors"] and META["classifiers"]


def _links(text: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", text)


def test_the_readme_links_are_absolute_and_name_files_that_exist() -> None:
    text = (REPO / "README.md").read_text()
    links = _links(text)
    assert links and all(u.startswith("https://") for u in links), \
        [u for u in links if not u.startswith("https://")]
    raw = BASE.replace("https://github.com/", "https://raw.githubusercontent.com/") + "/main/"
    for url in links:
        for prefix in (f"{BASE}/blob/main/", f"{BASE}/tree/main/", raw):
            if url.startswith(prefix):
                path = url.removeprefix(prefix).split("#", 1)[0]
                assert (REPO / path).exists(), url
                break
        else:
            pytest.fail(f"README links outside the project: {url}")
    assert "pip install fencecheck" in text and "pip install 'fencecheck[all]'" in text
    # the two commands, exactly
    assert "bash scripts/setup.sh && .venv/bin/fencecheck run" in text
    assert "bash scripts/test.sh" in text


def test_schemas_cite_no_file_the_package_lacks() -> None:
    from fencecheck.records.base import DOCS

    assert f"{BASE}/blob/main/docs" == DOCS
    for name in NAMES:
        text = str(schema(name))
        assert "DESIGN.md" not in text, name
        for url in re.findall(rf"{re.escape(DOCS)}/[\w./-]+", text):
            assert (REPO / "docs" / url.removeprefix(DOCS + "/")).exists(), url
