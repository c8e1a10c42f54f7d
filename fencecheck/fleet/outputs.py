"""What a matrix writes once its runs are done: the comparison report (`write_compare`, through
`reports.compare`), JUnit XML (`junit_cases`, `write_junit`, through `reports.junit`) and
matrix.json (`write_matrix_json`, through `records.matrix`). A sharded matrix's merge writes
the same files through these same writers.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from fencecheck.fleet.matrix import JUDGED, MatrixOutcome, RowResult
from fencecheck.reports.junit import Case, case_of_run, write_cases

log = logging.getLogger(__name__)


def write_compare(results: Sequence[RowResult], out_dir: Path) -> tuple[Path | None, str | None]:
    """reports.compare over this matrix's runs, each configuration judged by its row's
    expectation, with the rows themselves first."""
    from fencecheck.reports.compare import ExpectedRow, compare
    from fencecheck.reports.rundata import ReportError

    run_dirs = [r.run_dir for rr in results for r in rr.runs
                if r.run_dir is not None and (r.run_dir / "test.json").is_file()]
    if not run_dirs:
        return None, "no run produced a run directory"
    rows = [ExpectedRow(
        label=rr.row.label, expect=rr.row.expect, met=rr.met,
        verdicts=", ".join(r.verdict for r in rr.runs) or "not run",
        links=tuple((f"seed {r.seed}", r.report or r.run_dir) for r in rr.runs
                    if r.run_dir is not None),
    ) for rr in results]
    expectations = {rr.row.configs[0].test_name: rr.row.expect for rr in results}
    try:
        html_path, _csv = compare(run_dirs, out_dir, expectations=expectations,
                                  expected_rows=rows)
    except (ReportError, OSError) as e:
        log.warning("comparison report failed: %s", e)
        return None, str(e)
    return html_path, None


def junit_cases(results: Sequence[RowResult]) -> list[Case]:
    """One case per seed of each row, classname = the row, name = `seed <n>`: it passes when the
    run met the row's expectation (a must-find run that found violations passes)."""
    cases: list[Case] = []
    for rr in results:
        made = {r.seed: r for r in rr.runs}
        for seed in rr.row.seeds:
            rec = made.get(seed)
            name, expect = f"seed {seed}", rr.row.expect
            if rec is None:
                cases.append(Case(rr.row.label, name, "not-run", expect,
                                  detail="not run (interrupted)"))
            elif rec.run_dir is not None and rec.verdict in JUDGED:
                cases.append(case_of_run(rec.run_dir, classname=rr.row.label, name=name,
                                         expect=expect, duration_s=rec.duration_s,
                                         exit_code=rec.exit_code))
            else:
                cases.append(Case(rr.row.label, name, rec.verdict, expect, rec.duration_s,
                                  rec.exit_code, (("seed", str(seed)),),
                                  detail=rec.error or "",
                                  where=str(rec.report or rec.run_dir or rec.log or "")))
    return cases


def write_junit(results: Sequence[RowResult], path: Path, suite: str) -> None:
    """The matrix's JUnit file, through the one writer of reports.junit."""
    write_cases(junit_cases(results), path, suite)


def write_matrix_json(outcome: MatrixOutcome, path: Path) -> None:
    from fencecheck.records import matrix as matrix_record
    from fencecheck.records.matrix import MatrixRecord, MatrixRow, MatrixRun

    matrix_record.write(path, MatrixRecord(
        exit_code=outcome.exit_code,
        compare=str(outcome.compare_html) if outcome.compare_html else None,
        rows=[MatrixRow(
            row=rr.row.label, expect=rr.row.expect, met=rr.met,
            runs=[MatrixRun(seed=r.seed, exit_code=r.exit_code, verdict=r.verdict,
                            run_dir=str(r.run_dir) if r.run_dir else None,
                            report=str(r.report) if r.report else None,
                            duration_s=r.duration_s, error=r.error) for r in rr.runs],
        ) for rr in outcome.rows],
    ))
