"""`fencecheck check RUN_DIR`: judge a run directory again and rewrite its results and report.

- The history is read only from inside the run directory: a `history.jsonl` that is a link to a
  file outside it is refused (bad input), never followed.
- `results.json` and `report.html` are rewritten together, each by a rename of a new file made in
  the run directory (a link in their place is replaced, not written through). If the report
  cannot be made, the old one is removed: a report is never left beside results it disagrees
  with.
"""

from __future__ import annotations

import logging
from pathlib import Path

from fencecheck.checker.base import CheckerError
from fencecheck.records import results as results_record
from fencecheck.records.results import Results

log = logging.getLogger(__name__)

HISTORY = "history.jsonl"


def history_inside(run_dir: Path) -> Path:
    """The run's history file; CheckerError if it is missing or a link out of the directory."""
    root = run_dir.resolve()
    history = run_dir / HISTORY
    if not history.exists() and not history.is_symlink():
        raise CheckerError(f"{run_dir}: no {HISTORY} (not a run directory?)")
    target = history.resolve()
    if not target.is_relative_to(root):
        raise CheckerError(f"{history}: a link out of the run directory (to {target}): "
                           "not followed")
    return target


def rewrite(run_dir: Path, results: Results) -> str | None:
    """Write results.json, then report.html from it; returns a warning if the report could not
    be made (the stale one is removed then)."""
    from fencecheck.reports.html import write_report

    # a rename of a new file: a link in results.json's place is replaced, not written through
    results_record.write(run_dir / "results.json", results)
    report = run_dir / "report.html"
    try:
        write_report(run_dir)
        return None
    except Exception as e:  # the report is a view of the results: never keep a stale one
        log.debug("report of %s", run_dir, exc_info=True)
        if report.exists() or report.is_symlink():
            report.unlink()
        return f"report.html not written ({type(e).__name__}: {e}); the old one was removed"
