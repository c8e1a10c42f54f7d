"""The findings pages' generator (reports/findings_page.py) with a finding whose matrix row was
not run: its page is left as it is and the index says why, instead of the whole command failing
(the client-go finding's row lives in another matrix file, and its page is written by hand)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fencecheck.records import matrix as matrix_record
from fencecheck.reports.findings import main
from fencecheck.reports.findings_page import render_index, write_pages

WORDS = '''title = "{title}"
row = "{row}"
kind = "double-grant"
what_happens = "a holder pauses"
mechanism = "the library's step"
'''


def _finding(findings: Path, name: str, row: str) -> None:
    (findings / name).mkdir(parents=True)
    (findings / name / "finding.toml").write_text(WORDS.format(title=f"{name} title", row=row))


def _matrix(out: Path) -> Path:
    out.mkdir(parents=True)
    rec = matrix_record.MatrixRecord(rows=[matrix_record.MatrixRow(
        row="other", expect="must-find", met=False,
        runs=[matrix_record.MatrixRun(seed=1, verdict="error", run_dir=None)])])
    (out / "matrix.json").write_bytes(matrix_record.encode(rec))
    return out


def test_a_finding_whose_row_was_not_run_keeps_its_page_and_is_listed(tmp_path: Path) -> None:
    findings, docs = tmp_path / "findings", tmp_path / "docs"
    _finding(findings, "hand-written", "aligned")
    docs.mkdir()
    (docs / "hand-written.md").write_text("# by hand\n")
    replays = {"hand-written": {"tries": 10, "same_kind": 9}}
    written, skipped = write_pages(findings, [_matrix(tmp_path / "m")], replays, docs)
    assert written == [docs / "index.md"]
    assert skipped == ["hand-written: row `aligned` is in none of the matrix outputs given: "
                       "page not regenerated"]
    assert (docs / "hand-written.md").read_text() == "# by hand\n"
    index = (docs / "index.md").read_text()
    assert "| [hand-written title](hand-written.md) | ? | double-grant | – | 9/10 |" in index
    assert "- [hand-written](hand-written.md): row `aligned` is in none" in index


def test_the_command_skips_with_a_note_and_succeeds(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    findings, docs = tmp_path / "findings", tmp_path / "docs"
    _finding(findings, "absent", "nowhere")
    code = main(["--matrix", str(_matrix(tmp_path / "m")), "--findings", str(findings),
                 "--out", str(docs)])
    assert code == 0
    err = capsys.readouterr().err
    assert "skipped absent: row `nowhere`" in err
    assert not (docs / "absent.md").exists()


def test_a_measured_finding_shows_its_rate_and_no_note() -> None:
    line = {"name": "f", "title": "F", "kind": "lost-update", "client": "lib 1.0",
            "rate": {"kind": 7, "seeds": 10}, "replays": None}
    index = render_index([line])
    assert "| [F](f.md) | lib 1.0 | lost-update | 7/10 | – |" in index
    assert "Not measured" not in index
