"""matrix.json through its record: the file `write_matrix_json` writes decodes and encodes back
to every field, a hand-made one of few fields loads, and a field of the wrong type is named (the
Markdown comparison exits 3 on it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fencecheck.fleet.matrix import MatrixOutcome, Row, RowResult, RunRecord
from fencecheck.fleet.outputs import write_matrix_json
from fencecheck.records import matrix as matrix_record
from fencecheck.records.base import RecordError
from fencecheck.records.matrix import MatrixRecord
from fencecheck.reports.markdown import main


def _outcome(tmp_path: Path) -> MatrixOutcome:
    row = Row(index=1, label="pause-redis", expect="must-find", seeds=(1, 2), configs=(),
              timeout_s=60.0)
    runs = (RunRecord(1, 1, "invalid", tmp_path / "r1", tmp_path / "r1" / "report.html", 4.25),
            RunRecord(2, 3, "error", None, None, 0.5, "setup failed"))
    return MatrixOutcome((RowResult(row, runs),), tmp_path, tmp_path / "compare.html", None,
                         None, None)


def test_the_written_matrix_json_keeps_every_field(tmp_path: Path) -> None:
    path = tmp_path / "matrix.json"
    write_matrix_json(_outcome(tmp_path), path)
    on_disk = json.loads(path.read_text())
    rec = matrix_record.read(path)
    assert json.loads(matrix_record.encode(rec)) == on_disk
    assert list(on_disk) == ["exit_code", "compare", "rows"]  # as earlier releases wrote it
    assert list(on_disk["rows"][0]["runs"][0]) == ["seed", "exit_code", "verdict", "run_dir",
                                                   "report", "duration_s", "error"]
    (row,) = rec.rows
    assert row.row == "pause-redis" and row.met is False and rec.exit_code == 1
    assert [r.verdict for r in row.runs] == ["invalid", "error"]
    assert row.runs[0].run_dir == str(tmp_path / "r1") and row.runs[1].error == "setup failed"


def test_a_matrix_json_of_few_fields_still_loads() -> None:
    rec = matrix_record.decode('{"rows": [{"row": "r", "expect": "must-pass", "met": true, '
                               '"runs": [{"seed": 1, "verdict": "valid"}]}]}')
    assert rec.rows[0].runs[0].run_dir is None and rec.compare is None
    assert matrix_record.decode(matrix_record.encode(rec)) == rec
    assert isinstance(rec, MatrixRecord)


@pytest.mark.parametrize(("text", "named"), [
    ('{"rows": [{"row": "r", "expect": "must-pass", "met": "yes", "runs": []}]}',
     "rows[0].met: expected `bool`, got `str`"),
    ('{"rows": [{"row": "r", "expect": "x", "met": true, "runs": [{"seed": "1", '
     '"verdict": "valid"}]}]}', "rows[0].runs[0].seed: expected `int`, got `str`"),
    ('{"exit_code": 0}', "object missing required field `rows`"),
])
def test_a_bad_field_is_named(text: str, named: str) -> None:
    with pytest.raises(RecordError, match=r"^out/matrix\.json: ") as e:
        matrix_record.decode(text, "out/matrix.json")
    assert named in str(e.value)


def test_the_markdown_comparison_of_a_bad_matrix_json_is_exit_3(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "matrix.json").write_text('{"rows": [{"row": 5}]}')
    assert main([str(tmp_path)]) == 3
    assert "rows[0].row: expected `str`, got `int`" in capsys.readouterr().err
