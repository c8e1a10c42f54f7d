"""docs/your-own-lock.md, run as a reader would: every code block in order, in a fresh folder.
A python or js block is a file (named on its first line), a sh block is run with bash and must
end with the exit code its `# expect exit N` line names (0 when it names none)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, fc_namespaces, run_cmd

pytestmark = [pytest.mark.netns, pytest.mark.usefixtures("no_leftovers")]

DOC = REPO / "docs" / "your-own-lock.md"
FILE_NAME = re.compile(r'^(?:"""|// )([\w.-]+):')


def blocks() -> list[tuple[str, str]]:
    return [(m[0], m[1]) for m in re.findall(r"^```(\w+)\n(.*?)^```$", DOC.read_text(),
                                              re.S | re.M)]


def test_the_doc_has_a_python_class_a_program_and_commands() -> None:
    langs = [lang for lang, _ in blocks()]
    assert {"python", "js", "sh"} <= set(langs)
    for lang, text in blocks():
        if lang in ("python", "js"):
            assert FILE_NAME.match(text), f"a {lang} block does not name its file"


def test_the_tutorial_runs_as_written(tmp_path: Path) -> None:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node/npm not installed (scripts/build-clients.sh installs them)")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    for lang, text in blocks():
        if lang in ("python", "js"):
            m = FILE_NAME.match(text)
            assert m is not None
            (tmp_path / m[1]).write_text(text)
        elif lang == "sh":
            want = re.search(r"^# expect exit (\d)", text, re.M)
            r = run_cmd(["bash", "-c", text], cwd=tmp_path, env=env, timeout=300)
            assert "Traceback" not in r.stderr, r.stderr
            assert r.returncode == (int(want[1]) if want else 0), \
                f"{text}\n-> exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    for run in (tmp_path / "store").glob("*/latest"):
        assert (run / "report.html").exists()
        run_id = json.loads((run / "test.json").read_text())["run_id"]
        assert not fc_namespaces(run_id)
